"""Placement groups: reserve bundles of resources across nodes, all at once, then schedule
tasks and actors into them (``PlacementGroupSchedulingStrategy``)."""

from __future__ import annotations

import asyncio
import importlib
import sys
import types
from typing import Any

from ember import global_state
from ember.id_types import PlacementGroupID
from ember.ids import new_unique_id
from ember.object_ref import ObjectRef

VALID_STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")


class PlacementGroup:
    def __init__(self, pg_id: bytes, bundles: list[dict[str, float]], strategy: str = "PACK"):
        self.id_bytes = pg_id
        self.bundle_specs = bundles
        self.strategy = strategy

    @property
    def id(self) -> PlacementGroupID:
        """An id object, as Ray's (``.hex()`` is the text the table and the state API use)."""
        return PlacementGroupID(self.id_bytes)

    @property
    def bundle_count(self) -> int:
        return len(self.bundle_specs)

    def ready(self) -> ObjectRef:
        """A ref that becomes ready once every bundle is reserved; its value is this group,
        as Ray's (``get(pg.ready())`` is the group)."""
        worker = global_state.require_worker()
        ref = worker.new_pending_object()

        async def wait_then_fill() -> None:
            try:
                ok = await worker.gcs.call("wait_placement_group", {"pg_id": self.id_bytes})
                if ok:
                    worker.fill_object(ref.binary(), self)
                else:
                    worker.fill_object(
                        ref.binary(),
                        RuntimeError(f"placement group {self.id} was removed before it was ready"),
                        is_error=True,
                    )
            except Exception as e:
                worker.fill_object(ref.binary(), e, is_error=True)

        worker.loop.call_soon_threadsafe(lambda: asyncio.ensure_future(wait_then_fill()))
        return ref

    def wait(self, timeout_seconds: float | None = 30) -> bool:
        worker = global_state.require_worker()
        return bool(
            worker.call_gcs_sync(
                "wait_placement_group",
                {"pg_id": self.id_bytes, "timeout": timeout_seconds},
                timeout=(timeout_seconds or 1e9) + 10,
            )
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PlacementGroup) and other.id_bytes == self.id_bytes

    def __hash__(self) -> int:
        return hash(self.id_bytes)

    def __repr__(self) -> str:
        return f"PlacementGroup({self.id}, {self.bundle_specs}, {self.strategy})"


def placement_group(
    bundles: list[dict[str, float]],
    strategy: str = "PACK",
    name: str = "",
    lifetime: str | None = None,
    _soft_target_node_id: Any = None,
) -> PlacementGroup:
    if not isinstance(bundles, list) or not bundles:
        raise ValueError("placement_group() takes a non-empty list of resource dicts (bundles)")
    for i, b in enumerate(bundles):
        if not isinstance(b, dict) or not b:
            raise ValueError(f"bundle {i} must be a non-empty dict of resources, got {b!r}")
        for k, v in b.items():
            if not isinstance(v, int | float) or v < 0:
                raise ValueError(f"bundle {i}: resource {k!r} must be a non-negative number")
        if all(v == 0 for v in b.values()):
            raise ValueError(f"bundle {i} asks for no resources: {b!r}")
    if strategy not in VALID_STRATEGIES:
        raise ValueError(
            f"Invalid placement group strategy {strategy!r}; use one of {', '.join(VALID_STRATEGIES)}"
        )
    if lifetime not in (None, "detached"):
        raise ValueError("lifetime must be None or 'detached'")
    worker = global_state.require_worker()
    pg_id = new_unique_id()
    bundles = [{k: float(v) for k, v in b.items()} for b in bundles]
    worker.gcs_send_threadsafe(
        "create_placement_group",
        {
            "pg_id": pg_id,
            "bundles": bundles,
            "strategy": strategy,
            "name": name,
            "job_id": worker.job_id,
            "detached": lifetime == "detached",
        },
    )
    return PlacementGroup(pg_id, bundles, strategy)


def remove_placement_group(placement_group: PlacementGroup) -> None:
    worker = global_state.require_worker()
    worker.gcs_send_threadsafe("remove_placement_group", {"pg_id": placement_group.id_bytes})


def get_placement_group(name: str) -> PlacementGroup:
    worker = global_state.require_worker()
    info = worker.call_gcs_sync("get_placement_group", {"name": name})
    if info is None:
        raise ValueError(f"Failed to look up a placement group named {name!r}")
    return PlacementGroup(info["pg_id"], info["bundles"], info["strategy"])


def running_strategy(worker: Any) -> Any:
    """The scheduling strategy (as it travels) of the task or actor ``worker`` runs; None
    in a driver. An actor's calls run where the actor was placed."""
    spec = getattr(worker.current, "spec", None)
    if spec is None or spec.kind != 0:
        spec = getattr(getattr(worker, "executor", None), "actor_spec", None)
    return getattr(spec, "strategy", None)


def captured_strategy(worker: Any) -> tuple | None:
    """The strategy of a task or actor submitted without one from code that runs in a
    placement group with ``placement_group_capture_child_tasks=True``: the same group (any
    bundle), capturing its own children too, as in Ray. None otherwise."""
    strategy = running_strategy(worker)
    if type(strategy) is tuple and len(strategy) > 3 and strategy[3]:
        return ("PLACEMENT_GROUP", strategy[1], -1, True)
    return None


def get_current_placement_group() -> PlacementGroup | None:
    """The placement group the running task or actor was scheduled in; None in a driver or
    outside any group (Ray's ``get_current_placement_group``)."""
    worker = global_state.require_worker()
    strategy = running_strategy(worker)
    if not (isinstance(strategy, tuple) and strategy and strategy[0] == "PLACEMENT_GROUP"):
        return None
    info = worker.call_gcs_sync("get_placement_group", {"pg_id": strategy[1]})
    if info is None:
        return PlacementGroup(strategy[1], [])
    return PlacementGroup(strategy[1], info["bundles"], info["strategy"])


def placement_group_table(placement_group: PlacementGroup | None = None) -> Any:
    """Ray's table: one group's entry, or ``{id: entry}`` of every group; an entry has its
    ``placement_group_id``, ``name``, ``bundles`` ({index: resources}),
    ``bundles_to_node_id`` ({index: node id}), ``strategy``, ``state`` and ``stats``."""
    worker = global_state.require_worker()
    if placement_group is not None:
        info = worker.call_gcs_sync("get_placement_group", {"pg_id": placement_group.id_bytes})
        return _table_entry(info) if info is not None else {}
    return {
        g["placement_group_id"]: _table_entry(g)
        for g in worker.call_gcs_sync("list_placement_groups", None)
    }


def _table_entry(info: dict[str, Any]) -> dict[str, Any]:
    bundles = info.get("bundles") or []
    nodes = list(info.get("bundle_nodes") or [])
    nodes += [None] * (len(bundles) - len(nodes))
    return {
        "placement_group_id": info["placement_group_id"],
        "name": info.get("name") or "",
        "bundles": dict(enumerate(bundles)),
        # As Ray: every bundle, "" for one not placed (yet, or again after its node died).
        "bundles_to_node_id": {i: node or "" for i, node in enumerate(nodes)},
        "strategy": info.get("strategy") or "PACK",
        "state": info.get("state") or "PENDING",
        "stats": {"scheduling_state": info.get("reason") or info.get("state") or "PENDING"},
    }


class _CallableModule(types.ModuleType):
    """This module, callable as the function of its name. ``ember.util.placement_group``
    names both (as ``ray.util.placement_group`` does); Python binds the package's attribute
    to the module when the module is first imported (``from ember.util.placement_group
    import ...``), so after that ``ember.util.placement_group([...])`` reached the module."""

    def __call__(self, *args: Any, **kwargs: Any) -> PlacementGroup:
        return placement_group(*args, **kwargs)

    def __reduce__(self) -> tuple:
        # By name, as pickle does a plain module: a task that captured this module (Ray's
        # is an ordinary one) must serialize, and a subclass of ModuleType is not by default.
        return importlib.import_module, (self.__name__,)


sys.modules[__name__].__class__ = _CallableModule
