"""``ember memory`` run as a user would: a subprocess against a live local node."""

from __future__ import annotations

import json
import os
import subprocess
import sys

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

    holder = Holder.remote()
    ember.get(holder.ping.remote())
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
            if text in line and "ember.put" in line:
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
