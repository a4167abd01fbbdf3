"""The raylet's table of shared-process actor hosts (``raylet/shared_hosts.py``), driven with
a stand-in for the lease manager: which host a new actor goes to, when a new host starts,
what a guest's resources do to the node's, what a host's death reports, and when an empty
host ends. (The whole path, with real processes, is tests/test_shared_process_actors.py.)"""

from __future__ import annotations

import asyncio
import itertools
from types import SimpleNamespace

import pytest
from ember.raylet import lease_events as ev
from ember.raylet.lease_records import HOST_KEY_PREFIX, is_host_key
from ember.raylet.shared_hosts import SharedHosts
from ember.resources import NodeResources


class FakeConn:
    def __init__(self) -> None:
        self.sent: list[tuple[str, dict]] = []
        self.closed = False

    def send(self, op: str, body: dict) -> None:
        self.sent.append((op, body))


class FakeManager:
    """What SharedHosts asks of the lease manager: host workers on request (each a fresh
    worker), the node's resources, and the events it hands back."""

    def __init__(self, cpus: float = 2.0) -> None:
        self.machine = SimpleNamespace(
            resources=NodeResources({"CPU": cpus}),
            node_id=b"n" * 16,
            draining=False,
            stopping=False,
        )
        self.events: list = []
        self.gcs = FakeConn()
        self.raylet = SimpleNamespace(gcs=self.gcs)
        self.pool = SimpleNamespace(workers={})
        self.keys: list[bytes] = []
        self.demand_changes = 0
        self._n = itertools.count(1)

    def handle(self, event) -> None:
        self.events.append(event)

    def demand_changed(self) -> None:
        self.demand_changes += 1

    def request_actor_worker(self, body: dict, key: bytes) -> asyncio.Future:
        self.keys.append(key)
        n = next(self._n)
        worker_id = bytes([n]) * 16
        self.pool.workers[worker_id] = SimpleNamespace(
            worker_id=worker_id,
            pid=1000 + n,
            address=f"unix:/w{n}",
            dead=False,
            conn=FakeConn(),
            title="",
            exit_reason="",
        )
        fut = asyncio.get_running_loop().create_future()
        fut.set_result(
            {"lease_id": n, "worker_id": worker_id, "address": f"unix:/w{n}", "pid": 1000 + n}
        )
        return fut


def _body(actor: int, job: bytes = b"j1", cpus: float = 0.0) -> dict:
    return {
        "actor_id": bytes([actor]) * 16,
        "resources": {"CPU": cpus} if cpus else {},
        "job_id": job,
        "env": "",
    }


def test_actors_fill_the_least_loaded_host_and_a_new_one_starts_at_the_cap():
    async def go():
        m = FakeManager()
        hosts = SharedHosts(m, per_host=2, idle_seconds=0.01, spread=1)
        grants = [await hosts.lease(_body(i)) for i in range(5)]
        # Two per host: three hosts, filled in order.
        assert [g["pid"] for g in grants] == [1001, 1001, 1002, 1002, 1003]
        assert all(is_host_key(k) and k.startswith(HOST_KEY_PREFIX) for k in m.keys)
        # Another job's actor never shares a process with these.
        other = await hosts.lease(_body(9, job=b"j2"))
        assert other["pid"] == 1004
        # One leaves the first host: the next actor goes there, not to a new host.
        hosts.release(grants[0]["lease_id"], drop=False)
        again = await hosts.lease(_body(10))
        assert again["pid"] == 1001
        assert sorted((h["pid"], h["actors"]) for h in hosts.public()) == [
            (1001, 2),
            (1002, 2),
            (1003, 1),
            (1004, 1),
        ]

    asyncio.run(go())


def test_concurrent_placements_share_one_host_start():
    async def go():
        m = FakeManager()
        hosts = SharedHosts(m, per_host=100, idle_seconds=0.01, spread=1)
        grants = await asyncio.gather(*(hosts.lease(_body(i)) for i in range(20)))
        assert {g["pid"] for g in grants} == {1001}
        assert len(m.keys) == 1

    asyncio.run(go())


def test_a_jobs_actors_spread_over_one_host_per_cpu_before_sharing_one():
    async def go():
        m = FakeManager(cpus=3.0)
        hosts = SharedHosts(m, per_host=100, idle_seconds=0.01)
        assert hosts.spread == 3
        one_by_one = [(await hosts.lease(_body(i)))["pid"] for i in range(3)]
        assert one_by_one == [1001, 1002, 1003]  # a host per CPU first
        together = await asyncio.gather(*(hosts.lease(_body(10 + i)) for i in range(9)))
        assert len(m.keys) == 3  # then no new host: the emptiest takes the next
        assert sorted(h["actors"] for h in hosts.public()) == [4, 4, 4]
        assert {g["pid"] for g in together} == {1001, 1002, 1003}

    asyncio.run(go())


def test_concurrent_first_placements_are_spread_too():
    async def go():
        m = FakeManager(cpus=2.0)
        hosts = SharedHosts(m, per_host=100, idle_seconds=0.01)
        await asyncio.gather(*(hosts.lease(_body(i)) for i in range(10)))
        assert sorted(h["actors"] for h in hosts.public()) == [5, 5]

    asyncio.run(go())


def test_a_guests_cpus_come_out_of_the_node_and_go_back():
    async def go():
        m = FakeManager(cpus=1.0)
        hosts = SharedHosts(m, per_host=100, idle_seconds=0.01)
        a = await hosts.lease(_body(1, cpus=0.5))
        b = await hosts.lease(_body(2, cpus=0.5))
        assert m.machine.resources.available_dict()["CPU"] == 0.0
        # No room now: the request waits here (the GCS's view may be a heartbeat old) ...
        waiting = asyncio.ensure_future(hosts.lease(_body(3, cpus=0.5)))
        await asyncio.sleep(0.3)
        assert not waiting.done()
        # It is the node's demand meanwhile (the heartbeat reports it to the autoscaler),
        # told once to beat early.
        assert hosts.waiting_demands() == [{"CPU": 0.5}] and m.demand_changes == 1
        # ... until a guest gives its CPUs back.
        hosts.release(a["lease_id"], drop=False)
        assert any(isinstance(e, ev.ResourcesChanged) for e in m.events)
        third = await asyncio.wait_for(waiting, 2)
        assert hosts.waiting_demands() == []
        assert third["pid"] == b["pid"]
        assert m.machine.resources.available_dict()["CPU"] == 0.0
        # One that no node of this size could hold is refused at once.
        assert await hosts.lease(_body(4, cpus=2.0)) is None

    asyncio.run(go())


def test_a_host_death_reports_each_guest_and_frees_their_resources():
    async def go():
        m = FakeManager(cpus=2.0)
        hosts = SharedHosts(m, per_host=100, idle_seconds=0.01, spread=1)
        grants = [await hosts.lease(_body(i, cpus=0.25)) for i in range(4)]
        worker = m.pool.workers[grants[0]["worker_id"]]
        worker.exit_reason = "killed by signal 9 (SIGKILL)"
        assert hosts.host_died(worker) is True
        died = [body for op, body in m.gcs.sent if op == "worker_died"]
        assert sorted(b["actor_id"] for b in died) == [bytes([i]) * 16 for i in range(4)]
        assert all("SIGKILL" in b["reason"] and "shared process" in b["reason"] for b in died)
        assert m.machine.resources.available_dict()["CPU"] == 2.0
        assert not hosts.owns(grants[0]["lease_id"])
        # A worker that hosted nothing is not ours to report.
        assert hosts.host_died(SimpleNamespace(worker_id=b"x" * 16, exit_reason="")) is False

    asyncio.run(go())


def test_a_returned_lease_the_gcs_never_knew_drops_the_actor_and_an_empty_host_ends():
    async def go():
        m = FakeManager()
        hosts = SharedHosts(m, per_host=100, idle_seconds=0.01)
        g = await hosts.lease(_body(7))
        worker = m.pool.workers[g["worker_id"]]
        hosts.release(g["lease_id"], drop=True)
        assert worker.conn.sent == [
            (
                "exit",
                {"actor_id": bytes([7]) * 16, "force": True, "reason": "its lease was returned"},
            )
        ]
        await asyncio.sleep(0.05)
        ended = [e for e in m.events if isinstance(e, ev.LeaseEnded)]
        assert [e.lease_id for e in ended] == [1]  # the host's own lease
        assert hosts.public() == []

    asyncio.run(go())


def test_an_empty_host_that_gets_a_new_actor_in_time_stays():
    async def go():
        m = FakeManager()
        hosts = SharedHosts(m, per_host=100, idle_seconds=0.05)
        g = await hosts.lease(_body(1))
        hosts.release(g["lease_id"], drop=False)
        again = await hosts.lease(_body(2))
        assert again["pid"] == g["pid"]
        await asyncio.sleep(0.1)
        assert not [e for e in m.events if isinstance(e, ev.LeaseEnded)]

    asyncio.run(go())


@pytest.mark.parametrize("flag", ["draining", "stopping"])
def test_a_draining_or_stopping_node_takes_no_new_actor(flag):
    async def go():
        m = FakeManager()
        setattr(m.machine, flag, True)
        assert await SharedHosts(m, per_host=10, idle_seconds=0.01).lease(_body(1)) is None
        assert m.keys == []

    asyncio.run(go())
