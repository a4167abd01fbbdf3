"""The raylet's I/O shells wired together (leases, membership, placement groups) with fake
worker processes and a fake GCS: the messages a node gets, turned into the replies, kills and
GCS messages it sends. No processes, no sockets."""

from __future__ import annotations

import argparse
import asyncio
import signal
from collections.abc import Callable
from typing import Any

import pytest
from ember import config
from ember.raylet.raylet import Raylet
from ember.raylet.worker_pool import WorkerProc


class FakeProc:
    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.code: int | None = None
        self.signals: list[int] = []

    def poll(self) -> int | None:
        return self.code

    def send_signal(self, sig: int) -> None:
        self.signals.append(sig)
        self.code = -sig  # it dies at once


class FakeConn:
    def __init__(self) -> None:
        self.closed = False
        self.state: dict[str, Any] = {}
        self.sent: list[tuple[str, Any]] = []
        self.calls: list[str] = []

    def send(self, op: str, body: Any) -> None:
        self.sent.append((op, body))

    async def call(self, op: str, body: Any, timeout: float = 0) -> Any:
        self.calls.append(op)
        return {"view": []} if op == "register_node" else []

    def close(self, reason: str = "") -> None:
        self.closed = True


def make_raylet(cpus: float = 2) -> Raylet:
    args = argparse.Namespace(
        node_id="ab" * 8,
        session_dir="/tmp",
        address="unix:/tmp/none",
        gcs_address="unix:/tmp/none-gcs",
        arena_path="/tmp/none-arena",
        object_store_memory=1 << 20,
        node_ip="127.0.0.1",
        token_file=None,
        prestart=0,
        head=True,
    )
    r = Raylet(args, {"CPU": cpus})
    pids = iter(range(1000, 2000))

    def start_worker() -> WorkerProc:
        w = WorkerProc(bytes([next(pids) % 256]) * 16, FakeProc(next(pids)))
        r.pool.workers[w.worker_id] = w
        return w

    r.pool.start_worker = start_worker  # type: ignore[method-assign]
    r.membership.gcs = FakeConn()  # type: ignore[assignment]
    return r


def run(test: Callable[[Raylet], Any]) -> None:
    async def main() -> None:
        await test(make_raylet())

    asyncio.run(main())


def register_all(r: Raylet) -> None:
    for w in list(r.pool.workers.values()):
        if w.state.name == "STARTING":
            r.handlers["register_client"](FakeConn(), {"worker_id": w.worker_id, "address": "a"})


def lease_body(**kw: Any) -> dict:
    return {"resources": {"CPU": 1}, "job_id": b"job1", "name": "f", **kw}


def test_a_lease_starts_a_worker_is_granted_and_reused() -> None:
    async def test(r: Raylet) -> None:
        holder = FakeConn()
        fut = r.handlers["request_lease"](holder, lease_body())
        assert not fut.done() and len(r.pool.workers) == 1
        register_all(r)
        grant = fut.result()
        assert set(grant) == {"lease_id", "worker_id", "address", "gpu_ids", "pid", "node_id"}
        states = [w["state"] for w in r.handlers["list_workers"](None, None)]
        assert states == ["LEASED"]
        r.handlers["return_lease"](holder, {"lease_id": grant["lease_id"]})
        again = r.handlers["request_lease"](holder, lease_body()).result()
        assert again["worker_id"] == grant["worker_id"] and len(r.pool.workers) == 1

    run(test)


def test_a_dead_actor_worker_is_reported_to_the_gcs_with_its_exit() -> None:
    async def test(r: Raylet) -> None:
        fut = r.handlers["lease_actor_worker"](
            r.gcs, {"resources": {"CPU": 1}, "actor_id": b"actor", "class_name": "A"}
        )
        register_all(r)
        w = r.pool.workers[fut.result()["worker_id"]]
        w.proc.code = 1  # type: ignore[attr-defined]
        r.leases.reap()
        (op, body), *_ = r.gcs.sent  # type: ignore[union-attr]
        assert op == "worker_died" and body["actor_id"] == b"actor"
        assert body["reason"] == "the worker process exited with code 1"
        reason = await r.handlers["worker_exit_reason"](None, {"worker_id": w.worker_id})
        assert reason == body["reason"]
        assert r.resources.available_dict() == {"CPU": 2.0}

    run(test)


def test_a_holder_that_loses_its_worker_gets_it_killed_after_a_grace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(config, "worker_death_grace", 0.05)

    async def test(r: Raylet) -> None:
        holder = FakeConn()
        fut = r.handlers["request_lease"](holder, lease_body())
        register_all(r)
        grant = fut.result()
        w = r.pool.workers[grant["worker_id"]]
        r.handlers["return_lease"](holder, {"lease_id": grant["lease_id"], "worker_died": True})
        assert w.proc.signals == []  # type: ignore[attr-defined]
        assert w.state.name == "EXITING"
        await asyncio.sleep(0.1)
        assert w.proc.signals == [signal.SIGKILL]  # type: ignore[attr-defined]

    run(test)


def test_removing_a_placement_group_kills_the_workers_in_it() -> None:
    async def test(r: Raylet) -> None:
        pg = b"\x07" * 8
        bundles = [(0, {"CPU": 1})]
        assert r.handlers["reserve_bundles"](r.gcs, {"pg_id": pg, "bundles": bundles})
        fut = r.handlers["request_lease"](
            FakeConn(), lease_body(strategy=("PLACEMENT_GROUP", pg, 0))
        )
        register_all(r)
        w = r.pool.workers[fut.result()["worker_id"]]
        r.handlers["release_bundles"](r.gcs, {"pg_id": pg})
        assert w.proc.signals == [signal.SIGKILL]  # type: ignore[attr-defined]
        assert r.resources.total_dict() == {"CPU": 2.0}
        assert r.resources.available_dict() == {"CPU": 2.0}

    run(test)


def test_a_group_adds_bundles_here_and_releases_some_of_them() -> None:
    """A rescheduling group reserves a lost bundle beside one it kept on this node; the
    same request again reserves nothing twice; releasing one bundle keeps the other."""

    async def test(r: Raylet) -> None:
        pg = b"\x08" * 8
        cpu = f"CPU_group_{pg.hex()}"
        assert r.handlers["reserve_bundles"](r.gcs, {"pg_id": pg, "bundles": [(0, {"CPU": 1})]})
        again = {"pg_id": pg, "bundles": [(0, {"CPU": 1}), (1, {"CPU": 1})]}
        assert r.handlers["reserve_bundles"](r.gcs, again)
        assert r.handlers["reserve_bundles"](r.gcs, again)  # sent again: nothing more taken
        assert r.resources.available_dict()["CPU"] == 0.0
        assert r.resources.total_dict()[cpu] == 2.0
        assert r.bundle_report() == {pg: [0, 1]}
        in_bundle = {}
        for i in (0, 1):
            strategy = ("PLACEMENT_GROUP", pg, i)
            in_bundle[i] = r.handlers["request_lease"](FakeConn(), lease_body(strategy=strategy))
        register_all(r)
        workers = {i: r.pool.workers[f.result()["worker_id"]] for i, f in in_bundle.items()}
        r.handlers["release_bundles"](r.gcs, {"pg_id": pg, "indexes": [1]})
        assert r.bundle_report() == {pg: [0]}
        # The released bundle's task loses its worker; the kept bundle's runs on.
        assert workers[1].proc.signals == [signal.SIGKILL]  # type: ignore[attr-defined]
        assert workers[0].proc.signals == []  # type: ignore[attr-defined]
        available = r.resources.available_dict()
        assert available[f"CPU_group_0_{pg.hex()}"] == 0.0  # bundle 0's CPU, still leased
        assert f"CPU_group_1_{pg.hex()}" not in available and available["CPU"] == 1.0
        assert r.resources.total_dict()[cpu] == 1.0
        r.handlers["release_bundles"](r.gcs, {"pg_id": pg})
        assert r.bundle_report() == {}
        assert r.resources.total_dict() == {"CPU": 2.0}

    run(test)


def test_an_actor_lease_granted_after_its_gcs_connection_closed_is_ended() -> None:
    """The GCS that asked died while the request waited for a worker: nobody will use or
    return the lease, so the raylet ends it and kills its worker."""

    async def test(r: Raylet) -> None:
        asker = FakeConn()
        fut = r.handlers["lease_actor_worker"](
            asker, {"resources": {"CPU": 1}, "actor_id": b"actor", "class_name": "A"}
        )
        assert r.leases.actor_leases() == []
        asker.closed = True
        register_all(r)
        w = r.pool.workers[fut.result()["worker_id"]]
        assert r.leases.actor_leases() == [(fut.result()["lease_id"], w.worker_id, b"actor")]
        await asyncio.sleep(0)  # the grant's callback runs
        assert w.proc.signals == [signal.SIGKILL]  # type: ignore[attr-defined]
        assert r.leases.actor_leases() == []
        assert r.resources.available_dict() == {"CPU": 2.0}

    run(test)


def test_membership_views_and_rejoining_as_a_new_node() -> None:
    async def test(r: Raylet) -> None:
        other = {
            "node_id": b"other",
            "total": {"CPU": 4},
            "available": {"CPU": 4},
            "tcp_address": "tcp:x",
        }
        r.membership.set_view([other, {"node_id": r.node_id}])
        assert list(r.view.by_id) == [b"other"]
        peer = FakeConn()
        r.objects.peer_raylets[b"other"] = peer  # type: ignore[assignment]
        r.handlers["node_dead"](r.gcs, {"node_id": b"other"})
        assert r.view.nodes == [] and peer.closed and not r.objects.peer_raylets
        fut = r.handlers["request_lease"](FakeConn(), lease_body())
        register_all(r)
        w = r.pool.workers[fut.result()["worker_id"]]
        # A bundle held here was placed again elsewhere once the node was declared dead.
        r.handlers["reserve_bundles"](r.gcs, {"pg_id": b"\x09" * 8, "bundles": [(0, {"CPU": 1})]})
        old = r.node_id
        await r.membership.rejoin_as_new("test")
        assert r.bundle_report() == {}
        assert r.node_id != old and r.leases.machine.node_id == r.node_id
        assert r.pool.node["node_id"] == r.node_id
        assert w.proc.signals == [signal.SIGKILL]  # type: ignore[attr-defined]
        assert r.gcs.calls == ["register_node"]  # type: ignore[union-attr]
        assert r.resources.available_dict() == {"CPU": 2.0}

    run(test)
