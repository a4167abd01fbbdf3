"""Shared-process actors (``shared_process=True``): many actors in one worker process, each
with its own state, ordered mailbox, name, end and restarts, and its own row in the listings;
what they cannot keep is refused at the call that asks for it. A crash of the process fails
every actor in it, each restarted by its own rules in a new process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import ember
import psutil
import pytest
from ember.exceptions import ActorDiedError, ActorUnavailableError
from ember.util.state import list_actors
from ember_test_utils import gcs_restart_cluster, kill_the_gcs, process_gone, wait_until


@ember.remote(shared_process=True)
class Counter:
    def __init__(self, start: int = 0) -> None:
        self.n = start

    def incr(self, by: int = 1) -> int:
        self.n += by
        return self.n

    def value(self) -> int:
        return self.n

    def pid(self) -> int:
        return os.getpid()

    def actor_id(self) -> str:
        return ember.get_runtime_context().get_actor_id()

    def reconstructed(self) -> bool:
        return ember.get_runtime_context().was_current_actor_reconstructed

    def slow_then(self, seconds: float, value: int) -> int:
        time.sleep(seconds)
        self.n = value
        return value

    def leave(self) -> None:
        ember.actor.exit_actor()

    def crash(self) -> None:
        sys.exit(3)

    def exit_zero(self) -> None:
        sys.exit(0)

    def ask(self, other) -> int:
        # A call that blocks on another actor of the same process.
        return ember.get(other.incr.remote(), timeout=30)


@pytest.fixture(scope="module")
def node():
    """One CPU: the raylet gives a job one host per CPU before actors share one, so here
    every actor of the module's driver is in one process."""
    if ember.is_initialized():
        ember.shutdown()
    ctx = ember.init(num_cpus=1)
    yield ctx
    ember.shutdown()


def test_each_actor_keeps_its_own_state_in_one_process(node):
    actors = [Counter.remote(i * 100) for i in range(20)]
    assert ember.get([a.incr.remote(i) for i, a in enumerate(actors)], timeout=60) == [
        i * 100 + i for i in range(20)
    ]
    assert len(set(ember.get([a.pid.remote() for a in actors]))) == 1
    ids = ember.get([a.actor_id.remote() for a in actors])
    assert ids == [a._actor_id.hex() for a in actors]  # each call knows which actor it is in
    # Every actor has its own row, ALIVE, with the host's pid.
    rows = {r["actor_id"]: r for r in list_actors(filters=[("state", "=", "ALIVE")], limit=10_000)}
    pid = ember.get(actors[0].pid.remote())
    for a in actors:
        assert rows[a._actor_id.hex()]["pid"] == pid
        assert rows[a._actor_id.hex()]["class_name"] == "Counter"


def test_calls_of_one_actor_run_in_order_others_run_beside(node):
    a, b = Counter.remote(), Counter.remote()
    ember.get([a.value.remote(), b.value.remote()])
    slow = a.slow_then.remote(1.0, 7)
    after = a.value.remote()  # queued behind the slow call of the same actor
    t0 = time.monotonic()
    assert ember.get(b.incr.remote(), timeout=10) == 1  # another actor is not held up
    assert time.monotonic() - t0 < 0.8
    assert ember.get(after, timeout=10) == 7
    assert ember.get(slow) == 7
    # 300 calls to one actor arrive and run in the order sent.
    refs = [a.incr.remote() for _ in range(300)]
    assert ember.get(refs, timeout=60) == list(range(8, 308))


def test_an_actor_may_wait_on_another_in_the_same_process(node):
    askers = [Counter.remote() for _ in range(8)]
    asked = [Counter.remote() for _ in range(8)]
    assert len(set(ember.get([a.pid.remote() for a in askers + asked]))) == 1
    # Each asker's call blocks its thread on a call to an actor of the same process: the
    # process's threads grow so that those calls still run.
    refs = [askers[i].ask.remote(asked[i]) for i in range(8)]
    assert ember.get(refs, timeout=30) == [1] * 8


def test_kill_ends_only_that_actor(node):
    a, b = Counter.remote(), Counter.remote()
    pid = ember.get(a.pid.remote())
    queued = a.slow_then.remote(0.5, 1)
    ember.kill(a)
    with pytest.raises(ActorDiedError):
        ember.get(queued, timeout=15)
    with pytest.raises(ActorDiedError):
        ember.get(a.incr.remote(), timeout=15)
    assert ember.get(b.incr.remote(), timeout=15) == 1
    assert ember.get(b.pid.remote()) == pid  # the process lives on
    wait_until(
        lambda: (
            [r["state"] for r in list_actors(filters=[("actor_id", "=", a._actor_id.hex())])]
            == ["DEAD"]
        ),
        timeout=15,
    )


def test_exit_actor_and_sys_exit_zero_end_only_that_actor(node):
    a, b, c = Counter.remote(), Counter.remote(), Counter.remote()
    pid = ember.get(c.pid.remote())
    for actor, method in ((a, "leave"), (b, "exit_zero")):
        with pytest.raises(ActorDiedError):
            ember.get(getattr(actor, method).remote(), timeout=15)
        with pytest.raises(ActorDiedError) as e:
            ember.get(actor.incr.remote(), timeout=15)
        assert "intentional" in str(e.value) or "exit" in str(e.value)
    assert ember.get(c.incr.remote(), timeout=15) == 1
    assert ember.get(c.pid.remote()) == pid

    # The GCS hears of an exit from the host a moment after the caller has its error: the
    # listing says DEAD once it has (seen ALIVE right after, once, in a fresh clone's run).
    def states() -> list[str]:
        rows = {r["actor_id"]: r for r in list_actors(limit=10_000)}
        return [rows[x._actor_id.hex()]["state"] for x in (a, b, c)]

    wait_until(
        lambda: states() == ["DEAD", "DEAD", "ALIVE"],
        timeout=15,
        message=lambda: f"a and b DEAD, c ALIVE (saw {states()})",
    )


def test_a_crash_of_one_actor_restarts_it_alone_by_its_rules(node):
    a = Counter.options(max_restarts=1, max_task_retries=0).remote(5)
    other = Counter.remote(9)
    ember.get([a.value.remote(), other.value.remote()])
    with pytest.raises((ActorUnavailableError, ActorDiedError)):
        ember.get(a.crash.remote(), timeout=30)
    # Restarted: its constructor ran again (state 5), and it knows it was restarted.
    wait_until(lambda: _state(a) == "ALIVE" and _restarts(a) == 1, timeout=30)
    assert ember.get(a.value.remote(), timeout=30) == 5
    assert ember.get(a.reconstructed.remote(), timeout=30) is True
    assert ember.get(other.incr.remote()) == 10  # the other actor never noticed
    # The second crash is one more than max_restarts allows: dead.
    with pytest.raises((ActorUnavailableError, ActorDiedError)):
        ember.get(a.crash.remote(), timeout=30)
    wait_until(lambda: _state(a) == "DEAD", timeout=30)
    with pytest.raises(ActorDiedError):
        ember.get(a.value.remote(), timeout=30)


def test_a_process_crash_fails_all_its_actors_each_by_its_own_rules(node):
    keep = [Counter.options(max_restarts=2).remote(i) for i in range(3)]
    lose = [Counter.remote(10 + i) for i in range(3)]  # max_restarts=0
    named = Counter.options(name="survivor", max_restarts=-1).remote(42)
    everyone = [*keep, *lose, named]
    pids = set(ember.get([a.pid.remote() for a in everyone], timeout=30))
    assert len(pids) == 1
    (pid,) = pids
    for a in everyone:
        ember.get(a.incr.remote(), timeout=30)
    os.kill(pid, signal.SIGKILL)
    for a in lose:
        wait_until(lambda a=a: _state(a) == "DEAD", timeout=30)
        with pytest.raises(ActorDiedError) as e:
            ember.get(a.value.remote(), timeout=30)
        assert "shared process" in str(e.value)
    for i, a in enumerate(keep):
        wait_until(lambda a=a: _state(a) == "ALIVE" and _restarts(a) == 1, timeout=30)
        assert ember.get(a.value.remote(), timeout=30) == i  # constructed again
    assert ember.get(ember.get_actor("survivor").value.remote(), timeout=30) == 42
    new_pids = set(ember.get([a.pid.remote() for a in [*keep, named]], timeout=30))
    assert pid not in new_pids


def test_async_actors_share_a_loop_each_bounded_by_its_own_concurrency(node):
    @ember.remote(shared_process=True, max_concurrency=2)
    class Sleeper:
        def __init__(self) -> None:
            self.running = 0
            self.peak = 0

        async def nap(self, seconds: float) -> int:
            import asyncio

            self.running += 1
            self.peak = max(self.peak, self.running)
            await asyncio.sleep(seconds)
            self.running -= 1
            return self.peak

    a, b = Sleeper.remote(), Sleeper.remote()
    t0 = time.monotonic()
    peaks = ember.get([x.nap.remote(0.4) for x in (a, b) for _ in range(4)], timeout=30)
    took = time.monotonic() - t0
    assert max(peaks) == 2  # each actor ran two at a time, never more
    assert took < 1.5  # both actors' calls ran side by side (two rounds of 0.4 s each)


def test_what_a_shared_process_cannot_keep_is_refused_at_the_call(node):
    with pytest.raises(ValueError, match="runtime_env"):
        Counter.options(runtime_env={"env_vars": {"A": "1"}}).remote()
    with pytest.raises(ValueError, match="GPU"):
        Counter.options(num_gpus=1).remote()
    with pytest.raises(ValueError, match="num_cpus"):
        Counter.options(num_cpus=1).remote()

    @ember.remote(concurrency_groups={"io": 2})
    class Grouped:
        def f(self) -> int:
            return 1

    with pytest.raises(ValueError, match="concurrency groups"):
        Grouped.options(shared_process=True).remote()


def test_fractional_cpus_are_held_per_actor(node):
    held = [Counter.options(num_cpus=0.5).remote() for _ in range(2)]
    ember.get([a.value.remote() for a in held], timeout=30)
    wait_until(lambda: ember.available_resources().get("CPU", 0) == 0, timeout=15)
    # A third does not fit the node's one CPU: it waits, and says for what.
    third = Counter.options(num_cpus=0.5).remote(3)
    wait_until(lambda: _state(third) == "PENDING_CREATION", timeout=15)
    # The autoscaler's demand holds it once, whether it waits in the GCS (pending actors)
    # or in the raylet that the GCS's view sent it to (the node's heartbeat).
    wait_until(lambda: _waiting_shapes() == [{"CPU": 0.5}], timeout=15, message="the demand for it")
    ember.kill(held[0])
    assert ember.get(third.value.remote(), timeout=30) == 3  # placed once room came free
    for a in (held[1], third):
        ember.kill(a)
    wait_until(lambda: ember.available_resources().get("CPU", 0) == pytest.approx(1.0), timeout=15)


def test_many_actors_from_many_threads(node):
    made: list = []
    lock = threading.Lock()

    def make() -> None:
        mine = [Counter.remote(1) for _ in range(50)]
        with lock:
            made.extend(mine)

    threads = [threading.Thread(target=make) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert ember.get([a.incr.remote() for a in made], timeout=60) == [2] * 200


def test_shared_actors_live_through_a_gcs_restart(monkeypatch):
    """The GCS is SIGKILLed and comes back: the shared actors keep their state (the raylet
    registers their places again), one is killed alone afterwards (the new GCS finds the
    host by the others' address), and a new one joins the same host."""
    with gcs_restart_cluster(monkeypatch, head_cpus=1) as cluster:  # one host
        cluster.connect()
        actors = [Counter.remote(i) for i in range(3)]
        assert ember.get([a.incr.remote() for a in actors], timeout=30) == [1, 2, 3]
        pid = ember.get(actors[0].pid.remote(), timeout=30)
        kill_the_gcs(cluster.temp_root)
        assert ember.get([a.incr.remote() for a in actors], timeout=60) == [2, 3, 4]
        ember.kill(actors[0])
        with pytest.raises(ActorDiedError):
            ember.get(actors[0].incr.remote(), timeout=30)
        assert ember.get([a.incr.remote() for a in actors[1:]], timeout=30) == [4, 5]
        late = Counter.remote(100)
        assert ember.get(late.incr.remote(), timeout=60) == 101
        assert ember.get([late.pid.remote(), actors[1].pid.remote()], timeout=30) == [pid, pid]


DRIVER_WITH_SHARED_ACTORS = """
import sys, time, ember
ember.init(address=sys.argv[1])

@ember.remote(shared_process=True)
class Busy:
    def work(self):
        time.sleep(60)

actors = [Busy.remote() for _ in range(10)]
refs = [a.work.remote() for a in actors]
print("working", flush=True)
time.sleep(120)
"""


def test_a_sigkilled_driver_takes_its_shared_actors_and_their_host_with_it(monkeypatch, tmp_path):
    with gcs_restart_cluster(monkeypatch, head_cpus=1) as cluster:  # one host
        program = tmp_path / "driver.py"
        program.write_text(DRIVER_WITH_SHARED_ACTORS)
        driver = subprocess.Popen(
            [sys.executable, str(program), cluster.address], stdout=subprocess.PIPE, text=True
        )
        try:
            assert driver.stdout.readline().strip() == "working"

            def actors() -> list[dict]:
                return cluster.gcs_call("list_actors")

            wait_until(
                lambda: len(actors()) == 10 and all(a["state"] == "ALIVE" for a in actors()),
                timeout=30,
            )
            [pid] = {a["pid"] for a in actors()}
            host = psutil.Process(pid)
            driver.kill()
            driver.wait(10)
            # The job ends: every actor of it is dead, and the host (mid-call in all ten)
            # is gone too, though its calls were still sleeping.
            wait_until(lambda: all(a["state"] == "DEAD" for a in actors()), timeout=30)
            host.wait(30)
        finally:
            if driver.poll() is None:
                driver.kill()
                driver.wait(10)


def test_zz_hosts_one_per_cpu_on_the_machines_page_each_ending_when_empty(node):
    """Last in the module: on a fresh node of two CPUs, so the hosts hold only this test's
    actors. Four actors go to two hosts (one per CPU) of two each; the Machines page says
    how many each holds, and a host with none left ends."""
    ember.shutdown()
    ctx = ember.init(num_cpus=2)
    actors = [Counter.remote() for _ in range(4)]
    pids = ember.get([a.pid.remote() for a in actors], timeout=30)
    assert len(set(pids)) == 2 and all(pids.count(p) == 2 for p in pids)
    url = f"{ctx['dashboard_url']}/api/nodes/{ctx['node_id']}"

    def activity(pid: int) -> str:
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                workers = json.load(r).get("workers") or []
        except urllib.error.HTTPError as e:
            if e.code == 404:  # the node's agent has not reported yet
                return ""
            raise
        return next((w.get("activity", "") for w in workers if w.get("pid") == pid), "")

    for pid in set(pids):
        wait_until(lambda p=pid: activity(p) == "shared actors host (2 actors)", timeout=20)
    first = pids[0]
    mine = [a for a, p in zip(actors, pids, strict=True) if p == first]
    ember.kill(mine[0])
    wait_until(lambda: activity(first) == "shared actors host (1 actor)", timeout=20)
    ember.kill(mine[1])
    # No actor left in it: the host is ended after a short idle time, and its process exits;
    # the other host, still holding two, stays.
    wait_until(lambda: not _alive(first), timeout=30)
    (other,) = set(pids) - {first}
    assert _alive(other) and activity(other) == "shared actors host (2 actors)"


def _waiting_shapes() -> list[dict]:
    """Every shape waiting for room, as the autoscaler reads the GCS's view of the cluster."""
    from ember.autoscaler.demand import demand_from_cluster_info
    from ember.cli.status import fetch

    info = fetch(ember.get_runtime_context().gcs_address, None)
    return [dict(s) for s in demand_from_cluster_info(info).shapes]


def _row(a) -> dict:
    rows = list_actors(filters=[("actor_id", "=", a._actor_id.hex())], detail=True)
    return rows[0] if rows else {}


def _state(a) -> str:
    return _row(a).get("state", "")


def _restarts(a) -> int:
    return int(_row(a).get("num_restarts", 0) or 0)


def _alive(pid: int) -> bool:
    return not process_gone(pid)
