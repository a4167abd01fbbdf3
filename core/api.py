"""The public functions: ``init``, ``shutdown``, ``remote``, ``get``, ``put``, ``wait``, ...

Ray's names and signatures, so ``import ember as ray`` runs a Ray program unchanged. The top
of the driver/worker runtime: it imports the layers below it (``driver`` for init and
shutdown, ``actor`` and ``remote_function`` for ``@remote``, ``runtime_context``) and nothing
below imports it.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Sequence
from typing import Any

from ember.actor import ActorClass, ActorHandle, get_actor, method
from ember.core_worker.core_worker import CoreWorker
from ember.driver import current_worker as _worker
from ember.driver import init, is_initialized, shutdown
from ember.exceptions import GetTimeoutError
from ember.object_ref import ObjectRef
from ember.object_ref_generator import ObjectRefGenerator
from ember.protocol.messages.gcs import NoSuchActor
from ember.remote_function import RemoteFunction
from ember.runtime_context import get_gpu_ids, get_runtime_context

logger = logging.getLogger("ember")


# -- remote ----------------------------------------------------------------------------------
def remote(*args: Any, **kwargs: Any) -> Any:
    """``@ember.remote`` or ``@ember.remote(num_cpus=2, ...)`` on a function or a class."""
    if len(args) == 1 and not kwargs and callable(args[0]):
        return _make_remote(args[0], {})
    if args or not kwargs:
        # Ray refuses ``@ray.remote()`` too: a decorator called with nothing is a slip.
        raise TypeError(
            "The @ember.remote decorator is applied either with no arguments and no "
            "parentheses (@ember.remote) or with keyword arguments only, e.g. "
            "@ember.remote(num_cpus=2)."
        )

    def decorate(target: Any) -> Any:
        return _make_remote(target, kwargs)

    return decorate


def _make_remote(target: Any, opts: dict[str, Any]) -> Any:
    if inspect.isclass(target):
        return ActorClass(target, opts)
    if inspect.isfunction(target) or inspect.isbuiltin(target) or callable(target):
        return RemoteFunction(target, opts)
    raise TypeError(f"@ember.remote takes a function or a class, not {type(target).__name__}")


# -- objects ---------------------------------------------------------------------------------
def put(value: Any, *, _owner: Any = None) -> ObjectRef:
    return _worker().put(value)


def get(object_refs: Any, *, timeout: float | None = None) -> Any:
    """The value(s) of a ref or a list of refs; raises the task's error if it failed."""
    worker = _worker()
    if timeout is not None and timeout < 0:
        raise ValueError("timeout must be non-negative (or None to wait forever)")
    if isinstance(object_refs, ObjectRef):
        return worker.get([object_refs], timeout)[0]
    if isinstance(object_refs, list | tuple):
        for i, r in enumerate(object_refs):
            if not isinstance(r, ObjectRef):
                raise ValueError(
                    f"ember.get() takes an ObjectRef or a list of ObjectRefs; item {i} is a "
                    f"{type(r).__name__}.{_GENERATOR_HINT if _is_generator(r) else ''}"
                )
        return worker.get(list(object_refs), timeout)
    raise ValueError(
        f"ember.get() takes an ObjectRef or a list of ObjectRefs, not a "
        f"{type(object_refs).__name__}.{_GENERATOR_HINT if _is_generator(object_refs) else ''}"
    )


_GENERATOR_HINT = (
    " A generator task's items are refs: iterate it (for ref in gen: ember.get(ref)), or "
    "get gen.completed() to wait for the task's end."
)


def _is_generator(value: Any) -> bool:
    return isinstance(value, ObjectRefGenerator)


def wait(
    object_refs: Sequence[ObjectRef],
    *,
    num_returns: int = 1,
    timeout: float | None = None,
    fetch_local: bool = True,
) -> tuple[list[ObjectRef], list[ObjectRef]]:
    """Returns (ready, not_ready) once ``num_returns`` refs are ready or ``timeout`` passed.

    With ``fetch_local`` (the default, as in Ray) a ref is ready once its object is on this
    node: one in another node's shared memory is pulled here first. With False it is ready
    as soon as it exists anywhere in the cluster, and nothing is pulled.
    """
    if isinstance(object_refs, ObjectRef):
        raise TypeError("wait() expected a list of ObjectRef, got a single ObjectRef")
    if not isinstance(object_refs, list | tuple):
        raise TypeError(f"wait() expected a list of ObjectRef, got {type(object_refs).__name__}")
    refs = list(object_refs)
    if not refs:
        return [], []  # as Ray: nothing to wait for, whatever num_returns says
    # wait() is often called in a loop over a long list, one ready ref at a time, so the
    # checks here are most of its cost: one pass takes the ids of the plain ObjectRefs (a
    # comprehension reads a slot faster than map(attrgetter)), and the wait below reuses
    # them; the per-ref type check runs only when some item is not a plain ObjectRef.
    ids = [r._id for r in refs if r.__class__ is ObjectRef]
    if len(ids) != len(refs):
        bad = next((r for r in refs if not isinstance(r, ObjectRef)), None)
        if isinstance(bad, ObjectRefGenerator):
            return _wait_with_generators(refs, num_returns, timeout, fetch_local)
        if bad is not None:
            raise TypeError(f"wait() expected a list of ObjectRef, found a {type(bad).__name__}")
        ids = [r._id for r in refs]  # subclasses of ObjectRef
    if len(set(ids)) != len(ids):
        raise ValueError("Wait requires a list of unique object refs.")
    if num_returns <= 0:
        raise ValueError(f"Invalid number of objects to return {num_returns}.")
    if num_returns > len(refs):
        raise ValueError("num_returns cannot be greater than the number of objects provided.")
    if timeout is not None and timeout < 0:
        raise ValueError("timeout must be non-negative (or None to wait forever)")
    return _worker().wait(refs, num_returns, timeout, fetch_local, ids)


def _wait_with_generators(
    items: list, num_returns: int, timeout: float | None, fetch_local: bool
) -> tuple[list, list]:
    """wait() over refs and ObjectRefGenerators: a generator is ready when ``next`` on it
    would return at once (its next item is here, or it has ended), as in Ray."""
    probes = []
    for item in items:
        if isinstance(item, ObjectRefGenerator):
            probes.append(item._ready_probe())
        elif isinstance(item, ObjectRef):
            probes.append(item)
        else:
            raise TypeError(f"wait() expected a list of ObjectRef, found a {type(item).__name__}")
    ready, _ = wait(probes, num_returns=num_returns, timeout=timeout, fetch_local=fetch_local)
    ready_ids = {r._id for r in ready}
    done = [item for item, probe in zip(items, probes, strict=True) if probe._id in ready_ids]
    return done, [
        item for item, probe in zip(items, probes, strict=True) if probe._id not in ready_ids
    ]


# -- actors ----------------------------------------------------------------------------------
def kill(actor: ActorHandle, *, no_restart: bool = True) -> None:
    """Ends the actor now (running calls fail with ActorDiedError)."""
    if not isinstance(actor, ActorHandle):
        raise ValueError(f"ember.kill() takes an actor handle, not a {type(actor).__name__}")
    worker = _worker()
    if worker.local_mode:
        worker.kill_local_actor(actor)
        return
    try:
        worker.call_gcs_sync(
            "kill_actor",
            {
                "actor_id": actor._actor_id,
                "no_restart": no_restart,
                # Ray's words, with Ember's name: "killed by `ray.kill`".
                "reason": "it was killed by `ember.kill`"
                + ("" if no_restart else " (restart allowed)"),
            },
        )
    except NoSuchActor as e:  # a handle whose actor's registration failed: nothing to kill
        logger.info("kill: %s", e)


def cancel(object_ref: ObjectRef, *, force: bool = False, recursive: bool = True) -> None:
    """Cancels the task that makes the ref; its ``get`` raises TaskCancelledError.

    A running task is interrupted (``force``: its worker is killed); with ``recursive`` (the
    default) the tasks it submitted are cancelled too. An actor call waiting to run is
    dropped; a running one is interrupted only in an async actor (``CancelledError`` inside
    it), as Ray does; ``force`` is refused for actor calls."""
    if isinstance(object_ref, ObjectRefGenerator):
        object_ref = object_ref.completed()  # the generator task itself
    if not isinstance(object_ref, ObjectRef):
        raise TypeError(f"ember.cancel() takes an ObjectRef, not {type(object_ref).__name__}")
    worker = _worker()
    if worker.local_mode:
        return
    worker.cancel(object_ref, force, recursive)


# -- cluster ---------------------------------------------------------------------------------
def nodes() -> list[dict[str, Any]]:
    """One dict per node, in Ray's shape (``NodeID``, ``Alive``, ``Resources``, ...)."""
    worker = _worker()
    if worker.local_mode:
        return worker.nodes()
    out = []
    for n in worker.call_gcs_sync("list_nodes", None):
        out.append(
            {
                "NodeID": n["node_id"].hex(),
                "Alive": n["state"] == "ALIVE",
                "NodeManagerAddress": n["node_ip"],
                "NodeManagerHostname": n.get("hostname", ""),
                "NodeManagerPort": _port_of(n.get("tcp_address") or n["address"]),
                "ClientID": n["node_id"].hex(),
                "NodeName": n["node_ip"],
                "Resources": n["resources_total"] if n["state"] == "ALIVE" else {},
                "alive": n["state"] == "ALIVE",
                "IsHead": n.get("is_head", False),
                "ObjectStoreSocketName": n.get("arena_path", ""),
                "RayletSocketName": n["address"],
            }
        )
    return out


def _port_of(address: str) -> int:
    """The TCP port of a ``tcp:host:port`` address; 0 for a Unix socket."""
    return int(address.rsplit(":", 1)[1]) if address.startswith("tcp:") else 0


def cluster_resources() -> dict[str, float]:
    worker = _worker()
    if worker.local_mode:
        return worker.cluster_resources()
    total: dict[str, float] = {}
    for n in worker.call_gcs_sync("list_nodes", None):
        if n["state"] == "ALIVE":
            for k, v in n["resources_total"].items():
                total[k] = total.get(k, 0) + v
    return total


def available_resources() -> dict[str, float]:
    worker = _worker()
    if worker.local_mode:
        return worker.cluster_resources()
    total: dict[str, float] = {}
    local = worker.call_raylet_sync("node_stats", None)
    for n in worker.call_gcs_sync("list_nodes", None):
        if n["state"] != "ALIVE":
            continue
        avail = (
            local["resources_available"]
            if n["node_id"] == worker.node_id
            else n["resources_available"]
        )
        for k, v in avail.items():
            if v > 0:
                total[k] = total.get(k, 0) + v
    return total


def timeline(filename: str | None = None) -> Any:
    # Imported here: chrome_trace loads urllib.request and http.client (~19 ms at start-up),
    # which only a call to timeline() needs.
    from ember.chrome_trace import timeline as _timeline

    return _timeline(filename)


__all__ = [
    "CoreWorker",
    "GetTimeoutError",
    "available_resources",
    "cancel",
    "cluster_resources",
    "get",
    "get_actor",
    "get_gpu_ids",
    "get_runtime_context",
    "init",
    "is_initialized",
    "kill",
    "method",
    "nodes",
    "put",
    "remote",
    "shutdown",
    "timeline",
    "wait",
]
