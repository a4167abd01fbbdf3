"""Each part of the core worker sees it through a Protocol: the part uses nothing else of it,
and the CoreWorker provides all of it. Read from the source and one unstarted CoreWorker
(no processes, no sockets)."""

from __future__ import annotations

import ast
import asyncio
import importlib
import inspect
import textwrap

import pytest
from ember.core_worker.core_worker import DRIVER, CoreWorker

# (module, the part's class, its Protocol for the core worker)
PARTS = [
    ("ember.core_worker.task_submitter", "TaskSubmitter", "TaskSubmitterHost"),
    ("ember.core_worker.actor_submitter", "ActorSubmitter", "ActorSubmitterHost"),
    ("ember.core_worker.cluster_links", "ClusterLinks", "ClusterLinksHost"),
    ("ember.core_worker.lineage", "Lineage", "LineageHost"),
    ("ember.core_worker.executor", "Executor", "ExecutorHost"),
    ("ember.core_worker.event_export", "EventExporter", "EventExporterHost"),
    ("ember.core_worker.object_access", "ObjectAccess", "ObjectAccessHost"),
    ("ember.core_worker.ownership", "Ownership", "OwnershipHost"),
    ("ember.core_worker.created_actors", "CreatedActors", "CreatedActorsHost"),
    ("ember.core_worker.task_manager", "TaskManager", "TaskManagerHost"),
    ("ember.core_worker.generator_streams", "GeneratorStreams", "GeneratorStreamsHost"),
]


def _declared(cls: type) -> set[str]:
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    members = set()
    for node in tree.body[0].body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            members.add(node.target.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            members.add(node.name)
    return members


def _protocol_members(proto: type) -> tuple[set[str], set[str]]:
    """What ``proto`` declares itself, and that with what the protocols it extends declare
    (a part's host protocol may extend one that functions it calls need)."""
    inherited = set()
    for cls in proto.__mro__[1:]:
        if cls is not object and cls.__module__ != "typing":
            inherited |= _declared(cls)
    own = _declared(proto)
    return own, own | inherited


def _host_uses(part: type) -> set[str]:
    """Names read off the host: ``self.host.X``, or ``host.X`` after ``host = self.host``."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(part)))
    used = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        base = node.value
        via_self = (
            isinstance(base, ast.Attribute)
            and base.attr == "host"
            and isinstance(base.value, ast.Name)
            and base.value.id == "self"
        )
        if via_self or (isinstance(base, ast.Name) and base.id == "host"):
            used.add(node.attr)
    return used


@pytest.mark.parametrize("module, part, protocol", PARTS)
def test_a_part_uses_only_what_its_protocol_names(module: str, part: str, protocol: str) -> None:
    mod = importlib.import_module(module)
    own, members = _protocol_members(getattr(mod, protocol))
    used = _host_uses(getattr(mod, part))
    assert used, f"{part} reads nothing off its host?"
    assert used <= members, f"{part} uses {sorted(used - members)} not in {protocol}"
    assert own <= used, f"{protocol} names {sorted(own - used)} that {part} never uses"


@pytest.fixture(scope="module")
def core_worker(tmp_path_factory: pytest.TempPathFactory):
    session = tmp_path_factory.mktemp("session")
    cw = CoreWorker(
        mode=DRIVER, node={"node_id": b"n" * 16, "session_dir": str(session)}, job_id=b"j"
    )
    yield cw
    cw.loop.close()


@pytest.mark.parametrize("module, part, protocol", PARTS)
def test_the_core_worker_provides_every_protocol(core_worker, module, part, protocol) -> None:
    _, members = _protocol_members(getattr(importlib.import_module(module), protocol))
    missing = {name for name in members if not hasattr(core_worker, name)}
    assert not missing, f"CoreWorker lacks {sorted(missing)} of {protocol}"


def test_shutdown_ends_the_tasks_left_on_the_loop():
    """A shutdown cut short by its deadline (a node that stopped answering) left tasks on
    the loop, and each printed "Task was destroyed but it is pending!" at exit."""
    from ember.core_worker.core_worker import _cancel_pending_tasks

    async def main() -> list[asyncio.Task]:
        never = asyncio.get_running_loop().create_future()

        async def waits_forever() -> None:
            await asyncio.shield(never)

        stuck = [asyncio.create_task(waits_forever()) for _ in range(3)]
        await asyncio.sleep(0)
        await _cancel_pending_tasks()
        return stuck

    stuck = asyncio.run(main())
    assert [t.cancelled() for t in stuck] == [True, True, True]
