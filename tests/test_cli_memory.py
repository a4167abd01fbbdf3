"""``ember memory`` run as a user would: a subprocess against a live local node."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request

import ember
import numpy as np
from ember_test_utils import wait_for_node_agents

EMBER = os.path.join(os.path.dirname(sys.executable), "ember")


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([EMBER, *args], capture_output=True, text=True, timeout=60)


def test_memory_lists_each_reference_kind_with_call_sites(ember_start):
    ctx = ember_start(num_cpus=1)
    local = ember.put(np.arange(200_000))  # a large object: it lives in shared memory

    @ember.remote
    class Holder:
        def ping(self):
            return 1

    @ember.remote
    def one():
        return 1

    holder = Holder.remote()
    ember.get(holder.ping.remote())
    # Refs a task and actor calls return: made on these lines (the walk to the user's frame
    # starts above Ember's submit path, whichever way the call came in).
    returned = {
        "task": one.remote(),  # CALL-SITE task
        "call": holder.ping.remote(),  # CALL-SITE call
        "call with options": holder.ping.options(name="p").remote(),  # CALL-SITE options
    }
    ember.get(list(returned.values()))
    gone = ember.put(np.zeros(10))
    view = ember.get(gone)  # a zero-copy view keeps the object pinned after its ref is gone
    gone_hex = gone.hex()
    del gone

    wait_for_node_agents(ctx.dashboard_url)  # ember memory asks the node's agent
    result = _run("memory", "--address", ctx.address, "--format", "json")
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)["rows"]
    by_ref = {(r["object_ref"], r["reference_type"]): r for r in rows}
    row = by_ref[(local.hex(), "LOCAL_REFERENCE")]
    assert row["type"] == "Driver" and row["pid"] == os.getpid()
    assert row["size"] >= 1_600_000
    assert row["call_site"].endswith(f"{os.path.basename(__file__)}:{_line_of('np.arange')}")
    assert (gone_hex, "PINNED_IN_MEMORY") in by_ref
    for mark, ref in zip(("task", "call", "options"), returned.values(), strict=True):
        site = by_ref[(ref.hex(), "LOCAL_REFERENCE")]["call_site"]
        assert site.endswith(f"{os.path.basename(__file__)}:{_line_of(f'CALL-SITE {mark}')}")
    assert any(r["reference_type"] == "ACTOR_HANDLE" for r in rows)

    table = _run("memory", "--address", ctx.address, "--units", "MB").stdout
    assert "--- Summary for node address: 127.0.0.1 ---" in table
    assert "Reference Type" in table and local.hex() in table
    assert "LOCAL_REFERENCE" in table and "MB" in table
    by_site = _run("memory", "--address", ctx.address, "--group-by", "stack_trace").stdout
    assert "--- Summary for call site:" in by_site
    del view


def _line_of(text: str) -> int:
    with open(__file__) as f:
        for i, line in enumerate(f, 1):
            if text in line and ("ember.put" in line or "CALL-SITE" in text):
                return i
    raise AssertionError(text)


def test_memory_without_a_cluster_is_a_one_line_error(tmp_path):
    result = subprocess.run(
        [EMBER, "memory", "--address", f"unix:{tmp_path}/nothing-here"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert "could not reach the cluster" in result.stderr
    assert "Traceback" not in result.stderr


def test_memory_shows_spilled_and_restored_bytes(ember_start, monkeypatch):
    import re

    from ember_test_utils import wait_until

    monkeypatch.setenv("EMBER_OBJECT_SPILLING_THRESHOLD", "0.5")
    ctx = ember_start(num_cpus=1, object_store_memory=100_000_000)
    refs = [ember.put(np.full(20_000_000, i, dtype=np.uint8)) for i in range(5)]

    def stats() -> dict:
        return ember.global_state.worker.call_raylet_sync("node_stats", None)

    # 100 MB in a store whose mark is 50 MB: the oldest go to disk.
    store = wait_until(
        lambda: (s := stats())["spill"]["spilling_now"] == 0 and s["store"]["num_spilled"] and s,
        30,
        0.05,
        "spilling to settle",
    )["store"]
    assert store["num_spilled"] >= 2
    assert int(ember.get(refs[0])[0]) == 0  # read back from disk
    after = stats()["store"]
    assert after["num_restored_total"] == 1
    spilled_mib = round(after["spilled_bytes"] / 2**20)
    written_mib = round(after["bytes_spilled_total"] / 2**20)
    restored_mib = round(after["bytes_restored_total"] / 2**20)
    wait_for_node_agents(ctx.dashboard_url)
    want = [
        f"Spilled on disk now {spilled_mib} MiB, {after['num_spilled']} objects",
        f"Spilled {written_mib} MiB, {after['num_spilled_total']} objects, avg write throughput",
        f"Restored {restored_mib} MiB, 1 objects, avg read throughput",
    ]

    def shown() -> str | None:
        out = _run("memory", "--address", ctx.address).stdout
        return out if all(w in out for w in want) else None

    out = wait_until(shown, 30, 0.5, f"ember memory to show {want}")
    assert re.search(r"avg write throughput \d+ MiB/s", out)
    # The dashboard's Memory page reads the same figures per node.
    url = f"{ctx.dashboard_url.rstrip('/')}/api/frontend/object_groups"
    with urllib.request.urlopen(url, timeout=10) as r:
        (node,) = json.load(r)["store"].values()
    assert node["spilled"] == after["spilled_bytes"]
    assert node["spilled_objects"] == after["num_spilled"]
    assert node["restored"] == after["bytes_restored_total"]
    del refs
