"""The GCS's storage (``ember.gcs.storage``): each backend keeps what it was given across a
new process's reading, a loop turn's changes are one write, a reply waits until its change
is durable, a failed write is never acknowledged, and a GCS that reads the tables back
carries on where the last one stopped (names, groups, jobs, nodes waiting to reconnect).
SQLite runs on a file in a temp dir, Redis on a real ``redis-server`` started here."""

from __future__ import annotations

import asyncio
import inspect
import pickle
import subprocess

import pytest
from ember.gcs.actor_machine import ActorState
from ember.gcs.nodes import NodeState
from ember.gcs.placement_groups import PgState
from ember.gcs.storage import TABLES, Store, check_url, default_url, open_backend
from ember_test_utils import ember_cli, redis_server
from gcs_fakes import FakeConn, add_node, make_gcs, node_conn, settle, spec


@pytest.fixture(params=["memory", "sqlite", "redis"])
def storage_url(request, tmp_path):
    """A URL for each backend (memory's keeps nothing across instances: see shared())."""
    if request.param == "memory":
        yield "memory:"
    elif request.param == "sqlite":
        yield default_url(str(tmp_path))
    else:
        with redis_server(str(tmp_path)) as url:
            yield url


def reopen(url: str, first):
    """A second backend on the same storage (memory: the same object, as nothing else is)."""
    return first if url == "memory:" else open_backend(url)


async def answer(gcs, op: str, conn, body):
    """The GCS's reply to ``op``: at once, or once what it changed is durable."""
    result = gcs.handlers[op](conn, body)
    return await result if inspect.isawaitable(result) else result


def test_each_backend_reads_back_what_was_written(storage_url):
    async def main() -> None:
        backend = open_backend(storage_url)
        store = Store(backend)
        store.put("kv", b"a", b"1")
        store.put("kv", b"b", b"2")
        store.mark("actors", b"x", lambda: b"rendered")
        store.put("nodes", b"gone", b"soon")
        await store.durable()
        store.delete("nodes", b"gone")
        store.put("kv", b"a", b"1 again")
        await store.durable()
        second = Store(reopen(storage_url, backend))
        again = await second.load()
        await store.close()
        await second.close()
        assert set(again) == set(TABLES)
        assert again["kv"] == {b"a": b"1 again", b"b": b"2"}
        assert again["actors"] == {b"x": b"rendered"}
        assert again["nodes"] == {}

    asyncio.run(main())


def test_a_loop_turns_changes_are_one_write_rendering_each_record_once(tmp_path):
    async def main() -> None:
        store = Store(open_backend(default_url(str(tmp_path))))
        renders = []

        def render() -> bytes:
            renders.append(1)
            return b"v%d" % len(renders)

        for _ in range(100):  # one record changed 100 times, 100 others once
            store.mark("actors", b"same", render)
        for i in range(100):
            store.put("kv", b"k%d" % i, b"v")
        await store.durable()
        assert store.writes == 1
        assert len(renders) == 1
        tables = await store.load()
        assert tables["actors"] == {b"same": b"v1"} and len(tables["kv"]) == 100
        await store.close()

    asyncio.run(main())


class SlowBackend:
    """Writes complete when the test says so."""

    description = "slow"

    def __init__(self) -> None:
        self.gate: asyncio.Future | None = None
        self.written: list = []

    async def load(self) -> dict:
        return {}

    async def write(self, changes: list) -> None:
        self.gate = asyncio.get_running_loop().create_future()
        await self.gate
        self.written.extend(changes)

    async def close(self) -> None:
        pass


def test_a_reply_waits_until_its_change_is_durable():
    async def main() -> None:
        backend = SlowBackend()
        gcs, _, _ = make_gcs(Store(backend))
        conn = FakeConn()
        body = {"namespace": "ns", "key": b"k", "value": b"v"}
        reply = asyncio.ensure_future(gcs.handlers["kv_put"](conn, body))
        await settle()
        assert not reply.done() and backend.gate is not None  # written, not yet durable
        backend.gate.set_result(None)
        assert await asyncio.wait_for(reply, 5) is True
        assert backend.written == [("kv", pickle.dumps(("ns", b"k")), b"v")]
        # A request that changes nothing is answered at once.
        assert gcs.handlers["kv_get"](conn, {"namespace": "ns", "key": b"k"}) == b"v"

    asyncio.run(main())


class FailingBackend(SlowBackend):
    def write(self, changes: list) -> None:
        raise OSError("disk full")


def test_a_write_that_fails_is_never_acknowledged():
    async def main() -> None:
        failures: list[BaseException] = []
        store = Store(FailingBackend(), on_failure=failures.append)
        gcs, _, _ = make_gcs(store)
        body = {"namespace": "", "key": b"k", "value": b"v"}
        with pytest.raises(RuntimeError, match="storage failed: disk full"):
            await asyncio.wait_for(gcs.handlers["kv_put"](FakeConn(), body), 5)
        assert [str(e) for e in failures] == ["disk full"]

    asyncio.run(main())


def test_a_new_gcs_carries_on_from_the_tables(storage_url):
    """Everything a user was promised, read back by a second GCS on the same storage."""

    async def main() -> None:
        backend = open_backend(storage_url)
        gcs, _, _ = make_gcs(Store(backend))
        node_id, _ = add_node(gcs, cpus=4)
        driver = FakeConn()
        gcs.on_connect(driver)
        await answer(gcs, "register_job", driver, {"job_id": b"job1", "driver_pid": 1})
        keeper = spec(name="keeper", namespace="ns", detached=True, max_restarts=2)
        await answer(gcs, "create_actor", driver, keeper)
        await settle()
        await answer(
            gcs,
            "create_placement_group",
            driver,
            {"pg_id": b"pg1", "bundles": [{"CPU": 1}], "job_id": b"job1"},
        )
        await settle()
        body = {"namespace": "jobs", "key": b"sub1", "value": b"record"}
        await answer(gcs, "kv_put", driver, body)
        await gcs.store.flush_now()
        alive = gcs.actors.actors[keeper.actor_id]
        assert alive.state is ActorState.ALIVE

        again, _, _ = make_gcs(Store(reopen(storage_url, backend)))
        again.restore(await again.store.load())
        # The named detached actor, as it was: same worker, same address, same restarts.
        info = again.handlers["get_named_actor"](FakeConn(), {"name": "keeper", "namespace": "ns"})
        assert info["state"] == "ALIVE"
        assert info["address"] == alive.address and info["worker_id"] == alive.worker_id
        assert info["num_restarts"] == 0 and info["detached"] is True
        restored = again.actors.actors[keeper.actor_id]
        assert restored.max_restarts == 2 and restored.spec.actor_options["name"] == "keeper"
        pg = again.handlers["get_placement_group"](FakeConn(), {"pg_id": b"pg1"})
        assert pg["state"] == "CREATED" and pg["bundle_nodes"] == [node_id.hex()]
        jobs = again.handlers["list_jobs"](FakeConn(), None)
        assert [(j["job_id"], j["state"]) for j in jobs] == [(b"job1", "RUNNING")]
        assert again.handlers["kv_get"](FakeConn(), {"namespace": "jobs", "key": b"sub1"}) == (
            b"record"
        )
        # The node is listed ALIVE but not used until its raylet registers again...
        node = again.node_table.nodes[node_id]
        assert node.state is NodeState.ALIVE and not node.connected
        assert again.node_table.alive() == []
        raylet = node_conn()
        again.on_connect(raylet)
        reply = await answer(
            again,
            "register_node",
            raylet,
            {"node_id": node_id, "address": "unix:/r", "resources": {"CPU": 4}},
        )
        assert reply["ok"] and [n.node_id for n in again.node_table.alive()] == [node_id]
        assert (
            again.node_table.nodes[node_id].start_time == gcs.node_table.nodes[node_id].start_time
        )
        # ...and its driver comes back to the same job, which stays RUNNING.
        driver2 = FakeConn()
        again.on_connect(driver2)
        await answer(again, "register_job", driver2, {"job_id": b"job1", "driver_pid": 1})
        again.jobs.expire_unclaimed(60)
        assert again.jobs.jobs[b"job1"]["state"] == "RUNNING"
        # The owner's create_actor sent again (its reply was lost) is not a second actor.
        await answer(again, "create_actor", driver2, keeper)
        assert len(again.actors.actors) == 1
        assert again.actors.actors[keeper.actor_id].state is ActorState.ALIVE
        assert again.placement_groups.groups[b"pg1"].state is PgState.CREATED
        await gcs.store.close()
        await again.store.close()

    asyncio.run(main())


def test_a_job_whose_driver_never_comes_back_ends_after_the_timeout(tmp_path):
    async def main() -> None:
        url = default_url(str(tmp_path))
        gcs, _, _ = make_gcs(Store(open_backend(url)))
        await answer(gcs, "register_job", FakeConn(), {"job_id": b"j", "driver_pid": 1})
        await gcs.store.flush_now()
        again, _, _ = make_gcs(Store(open_backend(url)))
        again.restore(await again.store.load())
        assert again.jobs.jobs[b"j"]["state"] == "RUNNING"
        again.jobs.expire_unclaimed(60)
        job = again.jobs.jobs[b"j"]
        assert job["state"] == "FINISHED"
        assert job["end_reason"] == "its driver did not reconnect within 60 s of the GCS restarting"
        await gcs.store.close()
        await again.store.close()

    asyncio.run(main())


def test_storage_urls_are_checked_with_a_clear_error():
    check_url("memory:")
    check_url("sqlite:/tmp/x.sqlite3")
    check_url("redis://127.0.0.1:6379")
    for bad in ("sqlite:", "mysql://h", "redis:/x", ""):
        with pytest.raises(ValueError, match="use memory:, sqlite:PATH or redis://HOST:PORT"):
            check_url(bad)
    out = subprocess.run(
        [ember_cli(), "start", "--head", "--storage", "mysql://db"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode != 0
    assert "Invalid value for --storage" in out.stderr and "redis://HOST:PORT" in out.stderr


def test_a_creation_cut_off_by_a_restart_ends_its_worker_and_places_the_actor_again(tmp_path):
    async def main() -> None:
        url = default_url(str(tmp_path))
        gcs, _, _ = make_gcs(Store(open_backend(url)))
        node_id, _ = add_node(gcs)

        class Silent(FakeConn):  # a worker whose constructor never finishes
            async def call(self, op, body=None, timeout=None):
                await asyncio.get_running_loop().create_future()

        async def connect(address, handlers, name="", on_close=None):
            return Silent()

        gcs.actors.connect = connect
        creating = spec()
        await answer(gcs, "create_actor", FakeConn(), creating)
        await settle()
        first = gcs.actors.actors[creating.actor_id]
        assert first.state is ActorState.PENDING_CREATION and first.worker_id is not None
        await gcs.store.flush_now()

        again, _, _ = make_gcs(Store(open_backend(url)))
        again.restore(await again.store.load())
        raylet = node_conn()
        again.on_connect(raylet)
        body = {"node_id": node_id, "address": "unix:/r", "resources": {"CPU": 2}}
        await answer(again, "register_node", raylet, body)
        await settle()
        [kill] = raylet.ops("kill_worker")
        assert kill["worker_id"] == first.worker_id and "cut off by a GCS restart" in kill["reason"]
        placed = again.actors.actors[creating.actor_id]
        assert placed.state is ActorState.ALIVE and placed.worker_id != first.worker_id
        await gcs.store.close()
        await again.store.close()

    asyncio.run(main())


def test_a_head_whose_redis_does_not_answer_fails_to_start_saying_so(tmp_path):
    import shutil
    import tempfile

    from ember.session_processes import find_ember_processes
    from ember_test_utils import free_port

    root = tempfile.mkdtemp(prefix="emb-noredis-", dir="/tmp")
    nobody = f"redis://127.0.0.1:{free_port()}"
    argv = [ember_cli(), "start", "--head", "--port", str(free_port()), "--num-cpus", "1"]
    argv += ["--node-ip-address", "127.0.0.1", "--temp-dir", root, "--storage", nobody]
    argv += ["--include-dashboard", "false"]
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    finally:
        left = find_ember_processes(root)
        shutil.rmtree(root, ignore_errors=True)
    assert not left, left
    assert out.returncode != 0
    assert f"the GCS could not read its tables from {nobody}" in out.stderr, out.stderr
    assert "Connection refused" in out.stderr


def test_the_cluster_token_is_kept_with_the_tables(storage_url, tmp_path):
    """A head that made its own token adopts the one a previous head stored (and rewrites its
    token file with it); a token the user gave replaces the stored one; the SQLite file is
    owner-only, since it holds the token."""
    import os
    import stat

    from ember.cluster_token import read_token, write_token
    from ember.gcs.cluster_record import TABLE, TOKEN_KEY, settle_token

    async def head(token: bytes, keep_stored: bool, backend) -> tuple[bytes, bytes]:
        store = Store(backend)
        session = tmp_path / f"session-{token.decode()}"
        session.mkdir(exist_ok=True)
        path = write_token(str(session), token)
        served = await settle_token(store, await store.load(), token, path, keep_stored)
        await store.close()  # as a GCS stopping: the next head opens its own
        return served, read_token(path)

    async def main() -> None:
        first = open_backend(storage_url)
        assert await head(b"aa11", True, first) == (b"aa11", b"aa11")
        # A new head (its own new token) on the same storage keeps the stored one.
        assert await head(b"bb22", True, reopen(storage_url, first)) == (b"aa11", b"aa11")
        # A token the user gave wins, and is stored for the next head.
        assert await head(b"cc33", False, reopen(storage_url, first)) == (b"cc33", b"cc33")
        last = Store(reopen(storage_url, first))
        tables = await last.load()
        await last.close()
        assert tables[TABLE] == {TOKEN_KEY: b"cc33"} and tables["kv"] == {}
        if storage_url.startswith("sqlite:"):
            mode = stat.S_IMODE(os.stat(storage_url[len("sqlite:") :]).st_mode)
            assert mode == 0o600, oct(mode)

    asyncio.run(main())
