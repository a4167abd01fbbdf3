"""Many actors on one node: hundreds of ``num_cpus=0`` actors start and answer, the node's
log stays quiet about it, and a node short of memory holds worker starts back and says why
(the memory monitor's test hook, ``EMBER_MEMORY_MONITOR_USAGE_FILE``, stands in for a full
machine)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import ember
import pytest
from ember_test_utils import assert_no_ember_children, wait_until

N_ACTORS = 300


@ember.remote(num_cpus=0)
class Pinger:
    def ping(self) -> int:
        return os.getpid()


@pytest.fixture
def fresh():
    if ember.is_initialized():
        ember.shutdown()
    yield
    ember.shutdown()
    assert_no_ember_children()


def _raylet_log(ctx) -> str:
    return (Path(ctx.session_dir) / "logs" / "raylet.log").read_text()


def test_hundreds_of_zero_cpu_actors_start_and_answer(fresh):
    ctx = ember.init(num_cpus=2, include_dashboard=False)
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
    print(f"{N_ACTORS} actors answered in {took:.1f} s ({N_ACTORS / took:.0f}/s)")


def test_a_node_short_of_memory_holds_worker_starts_and_says_why(fresh, tmp_path, capfd):
    from ember.raylet.memory_monitor import UsageReader

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
        lambda: "Not starting more worker processes" in capfd.readouterr().err,
        10,
        0.05,
        "the driver's warning",
    )
    usage.write_text("0.10")  # memory frees up: the waiting actors start
    assert len(set(ember.get(refs, timeout=60))) == 3
