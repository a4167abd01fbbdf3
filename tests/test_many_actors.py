"""Many actors on one node: hundreds of ``num_cpus=0`` actors start and answer, the node's
log stays quiet about it, each idle one holds little memory of its own, a worker forked from
the prepared zygote still does real work, and a node short of memory holds worker starts
back and says why (the memory monitor's test hook, ``EMBER_MEMORY_MONITOR_USAGE_FILE``,
stands in for a full machine)."""

from __future__ import annotations

import hashlib
import logging
import os
import statistics
import time
from pathlib import Path

import ember
import pytest
from ember_test_utils import assert_no_ember_children, printed_to, wait_until

N_ACTORS = 300
# The median unique set size an idle actor may hold (benchmarks/actor_memory.py measured
# 3.82 MiB on this machine, 2026-11-30, and this test 3.82; 4.05 before the zygote laid out
# its hot functions' objects together and emptied the method cache before each fork, 4.55
# before it laid out their code and event loops gave back their receive buffer's pages, 5.07
# before the zygote prepared its heap, handler plan and log handlers).
IDLE_ACTOR_USS_MIB = 4.1


@ember.remote(num_cpus=0)
class Pinger:
    def ping(self) -> int:
        return os.getpid()


@pytest.fixture(scope="module")
def node():
    """One node for the tests that only add actors to it (the memory test makes its own)."""
    if ember.is_initialized():
        ember.shutdown()
    ctx = ember.init(num_cpus=2, include_dashboard=False)
    yield ctx
    ember.shutdown()


@pytest.fixture
def fresh():
    if ember.is_initialized():
        ember.shutdown()
    yield
    ember.shutdown()
    assert_no_ember_children()


def _raylet_log(ctx) -> str:
    return (Path(ctx.session_dir) / "logs" / "raylet.log").read_text()


def _uss_mib(pid: int) -> float:
    """What psutil's ``memory_full_info().uss`` says, read from ``smaps_rollup`` alone."""
    with open(f"/proc/{pid}/smaps_rollup") as f:
        return sum(int(x.split()[1]) for x in f if x.startswith("Private_")) / 1024


def test_hundreds_of_zero_cpu_actors_start_and_answer(node):
    ctx = node
    start = time.monotonic()
    actors = [Pinger.remote() for _ in range(N_ACTORS)]
    pids = ember.get([a.ping.remote() for a in actors], timeout=120)
    took = time.monotonic() - start
    assert len(set(pids)) == N_ACTORS, "every actor has a process of its own"
    # A second round reaches every actor again (none died after answering once).
    assert ember.get([a.ping.remote() for a in actors], timeout=60) == pids
    log = _raylet_log(ctx)
    # No start failed, and the node never thought itself dead under the burst.
    assert "died while starting" not in log, log[-3000:]
    assert "rejoining as a new node" not in log
    assert "Not starting more worker processes" not in log
    # Each idle actor holds little of its own: the pages it copied from the zygote it was
    # forked from (reference counts written, free slots reused) and those it allocated.
    uss = statistics.median(_uss_mib(p) for p in pids)
    print(
        f"{N_ACTORS} actors answered in {took:.1f} s ({N_ACTORS / took:.0f}/s), USS {uss:.2f} MiB"
    )
    assert uss <= IDLE_ACTOR_USS_MIB, f"median USS of an idle actor {uss:.2f} MiB"


@ember.remote(num_cpus=0)
class Worker:
    def ping(self) -> int:
        return os.getpid()

    def digest(self, data: bytes) -> str:
        return hashlib.sha256(data).hexdigest()

    def make(self, n: int) -> bytes:
        return bytes(range(256)) * (n // 256)

    def add(self, i: int) -> int:
        return i + 1

    def log(self, text: str) -> None:
        logging.getLogger("ember.test_many_actors").warning(text)


def test_a_forked_worker_does_real_work_after_idling(node):
    """The zygote's preparations (filled pools, handler plan, log handlers made before the
    fork) leave a worker that takes large arguments, returns large values, answers many
    calls in order and writes Ember's log records to its own file."""
    w = Worker.remote()
    pid = ember.get(w.ping.remote(), timeout=60)
    time.sleep(1.0)  # idle: its exporter and drain have gone to sleep
    big = os.urandom(8 * 1024 * 1024)  # through the object store
    assert ember.get(w.digest.remote(big), timeout=60) == hashlib.sha256(big).hexdigest()
    made = ember.get(w.make.remote(6 * 1024 * 1024), timeout=60)
    assert made == bytes(range(256)) * (6 * 1024 * 1024 // 256)
    assert ember.get([w.add.remote(i) for i in range(2000)], timeout=120) == list(range(1, 2001))
    marker = f"marker-{os.urandom(4).hex()}"
    ember.get(w.log.remote(marker), timeout=60)
    logs = Path(node.session_dir) / "logs"

    def logged() -> bool:
        return any(marker in p.read_text() for p in logs.glob(f"worker-*-{pid}.log"))

    wait_until(logged, 30, 0.05, "the worker's log record in its own .log file")
    assert ember.get(w.ping.remote(), timeout=60) == pid, "the same process throughout"


def test_a_node_short_of_memory_holds_worker_starts_and_says_why(fresh, tmp_path, monkeypatch):
    from ember.raylet.memory_monitor import UsageReader

    err = printed_to(monkeypatch, "stderr")

    # 64 MiB below the 0.9 at which the memory monitor kills: within the 128 MiB where
    # worker starts stop.
    fraction = 0.9 - 64 * 1024**2 / UsageReader().read().total
    usage = tmp_path / "usage"
    usage.write_text(f"{fraction:.6f}")
    env = {
        "EMBER_MEMORY_MONITOR_USAGE_FILE": str(usage),
        "EMBER_MEMORY_USAGE_THRESHOLD": "0.9",
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        ctx = ember.init(num_cpus=2, include_dashboard=False)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    actors = [Pinger.remote() for _ in range(3)]
    refs = [a.ping.remote() for a in actors]
    wait_until(
        lambda: "Not starting more worker processes" in _raylet_log(ctx),
        30,
        0.05,
        "the raylet to say why it starts no worker",
    )
    ready, _ = ember.wait(refs, num_returns=len(refs), timeout=1.0)
    assert ready == [], "no worker may start while memory is short"
    log = _raylet_log(ctx)
    assert log.count("Not starting more worker processes") == 1, "said once per episode"
    line = next(x for x in log.splitlines() if "Not starting more worker processes" in x)
    assert f"{fraction:.1%} used" in line and "EMBER_MEMORY_USAGE_THRESHOLD 0.9" in line, line
    # The driver was told too.
    wait_until(
        lambda: "Not starting more worker processes" in err.getvalue(),
        10,
        0.05,
        "the driver's warning",
    )
    usage.write_text("0.10")  # memory frees up: the waiting actors start
    assert len(set(ember.get(refs, timeout=60))) == 3
