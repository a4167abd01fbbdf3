"""`python -m ember.tools.microbenchmark` runs `ray microbenchmark`'s workloads on the real runtime."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

import ember
import pytest
from ember.tools import microbenchmark

RAY_ROWS = [
    "single client get calls (Plasma Store)",
    "single client put calls (Plasma Store)",
    "single client put gigabytes",
    "single client wait 1k refs",
    "single client tasks sync",
    "single client tasks async",
    "1:1 actor calls sync",
    "1:1 actor calls async",
    "1:1 actor calls concurrent",
    "1:n actor calls async",
    "n:n actor calls async",
    "1:1 async-actor calls sync",
    "1:1 async-actor calls async",
    "placement group create/removal",
]
EMBER_ROWS = ["init -> first task -> shutdown", "idle local node resident memory"]

runtime_built = pytest.mark.skipif(not hasattr(ember, "init"), reason="runtime not built yet")


def _run(args: list[str], cwd: os.PathLike[str], timeout: float) -> subprocess.CompletedProcess:
    """Run the module in its own process group; on timeout end the whole group."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "ember.tools.microbenchmark", *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"no result within {timeout} s:\n{out}\n{err[-3000:]}")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_rows_are_ray_rows_in_ray_order(tmp_path):
    listed = _run(["--list"], tmp_path, 60).stdout.splitlines()
    assert listed == RAY_ROWS + EMBER_ROWS
    assert [w.name for w in microbenchmark.select("single client")] == RAY_ROWS[:6]


@runtime_built
def test_single_client_rows_quick(tmp_path):
    selected = [w.name for w in microbenchmark.select("single client")]
    done = _run(
        ["--quick", "--filter", "single client", "--json", str(tmp_path / "out.json")],
        tmp_path,
        240,
    )
    report = f"stdout:\n{done.stdout}\nstderr (tail):\n{done.stderr[-3000:]}"
    assert "FAILED" not in done.stdout, report
    for name in selected:
        line = re.compile(rf"^{re.escape(name)} per second \d+(\.\d+)? \+- \d", re.M)
        assert line.search(done.stdout), f"no 'per second' line for {name!r}\n{report}"
    assert done.returncode == 0, report


@runtime_built
def test_spilled_object_rows_quick(tmp_path):
    # Ember's rows for spilled objects (with --extra): a 300 MiB store holding 600 MiB.
    names = [w.name for w in microbenchmark.select("(spilled)", extra=True)]
    assert names == [
        "single client put gigabytes (spilled)",
        "single client get gigabytes (spilled)",
    ]
    assert microbenchmark.select("(spilled)") == []  # not in Ray's comparison set
    done = _run(["--quick", "--extra", "--filter", "(spilled)"], tmp_path, 240)
    report = f"stdout:\n{done.stdout}\nstderr (tail):\n{done.stderr[-3000:]}"
    assert "FAILED" not in done.stdout, report
    for name in names:
        line = re.compile(rf"^{re.escape(name)} per second \d+(\.\d+)? \+- \d", re.M)
        assert line.search(done.stdout), f"no 'per second' line for {name!r}\n{report}"
