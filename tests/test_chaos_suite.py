"""The chaos and abuse suite (issue 19), run once in its quick mode as a user runs it, and a
check that its leak measures do see a leak (a suite that reads 0 whatever happens proves
nothing)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from ember.tools.chaos import faults_peers
from ember.tools.chaos.harness import Harness

QUICK_BUDGET = 230.0  # seconds: the quick mode's promise is ~3 minutes on a 2-core VM
# The idle and flood peers wait out the listeners' authentication deadline (5 s by default)
# before they count as closed; a shorter one proves the same closing, and 2.5 s is still far
# beyond what a real peer needs to send its token (tests/cluster/test_preauth_limits.py
# runs a cluster at 1.5 s).
AUTH_DEADLINE = "2.5"


@pytest.mark.timeout(QUICK_BUDGET + 20)
def test_the_quick_chaos_run_survives_everything_and_leaks_nothing(tmp_path):
    report = tmp_path / "chaos.json"
    cmd = [sys.executable, "-m", "ember.tools.chaos", "--quick", "--json", str(report)]
    # On timeout, run() kills the suite with SIGKILL: its nodes (daemons) would outlive it,
    # so the deadline is the suite's SIGTERM path, which cleans up, well before pytest's.
    env = {**os.environ, "EMBER_AUTH_DEADLINE_SECONDS": AUTH_DEADLINE}
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    try:
        out, _ = proc.communicate(timeout=QUICK_BUDGET)
    except subprocess.TimeoutExpired:
        proc.terminate()
        out, _ = proc.communicate(timeout=60)
        pytest.fail(f"the quick chaos run took over {QUICK_BUDGET:g} s:\n{out[-4000:]}")
    print(out)
    result = json.loads(report.read_text())
    total = result["total"]
    assert proc.returncode == 0, out[-4000:]
    assert result["error"] is None
    assert len(result["rows"]) == 15
    assert all(r["injected"] == 1 for r in result["rows"]), result["rows"]
    assert total["survived"] == total["injected"] == 15
    assert total["bytes_leaked"] == 0
    assert total["shm_files_left"] == 0
    assert total["processes_left"] == 0
    assert result["forced_cleanup"] == {"processes": [], "shm_files": []}
    hostile = [r for r in result["rows"] if r["fault"].startswith("peer:")]
    assert len(hostile) == 3
    assert all(r["connections_refused"] > 0 for r in hostile), hostile
    assert "injected  survived" in out and "total" in out  # the table was printed


@pytest.mark.timeout(120)
def test_the_leak_measures_see_a_live_drivers_objects_and_processes():
    h = Harness(log=lambda _: None)
    try:
        h.start()
        d = h.driver("exit")
        d.expect("READY", 60)
        assert h.settle(timeout=1) > 0  # its objects are held: not idle
        assert any(tag == "driver" for _, tag in h.marked())
        assert h.stray_processes(timeout=0.5)  # a driver still running counts
        d.tell("end now")
        assert d.wait(60) == 0
        assert h.settle() == 0
        assert h.stray_processes() == []
        # A listener the suite attacks is among the cluster's real ports.
        assert "GCS" in faults_peers._listeners(h)
    finally:
        procs, shm = h.close()
    assert procs == [] and shm == []
    assert h.shm_files() == []
