"""py-spy failures at the agent's boundary (``dashboard/pyspy.py``), with the real py-spy:
each failure is a clear message with a 4xx or 503 status, never an unclassified 500."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys

import pytest
from ember.agent import pyspy


@pytest.fixture
def sleeper():
    """A process that is not Python (coreutils' sleep)."""
    proc = subprocess.Popen(["sleep", "60"])
    yield proc.pid
    proc.kill()
    proc.wait()


@pytest.fixture
def python_sleeper():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield proc.pid
    proc.kill()
    proc.wait()


def test_a_process_that_is_not_python_is_a_422(sleeper):
    assert pyspy.pyspy_path() is not None, "py-spy is a dependency of the dashboard"
    res = asyncio.run(pyspy.dump(sleeper))
    assert res["status"] == 422 and res["threads"] == []
    assert f"pid {sleeper} is not a Python process" in res["error"]
    assert "Stack backtrace" not in res["error"]  # py-spy's own reason, not its backtrace
    res = asyncio.run(pyspy.record(sleeper, 1, "speedscope"))
    assert res["status"] == 422 and "not a Python process" in res["error"]


def test_a_process_that_is_gone_is_a_404():
    proc = subprocess.Popen(["true"])
    proc.wait()
    res = asyncio.run(pyspy.record(proc.pid, 1, "svg"))
    assert res["status"] == 404 and str(proc.pid) in res["error"]
    res = asyncio.run(pyspy.dump(proc.pid))
    assert res["status"] == 404 and "no longer exists" in res["error"]


def test_py_spy_not_installed_says_where_it_looked_and_what_to_do(monkeypatch, python_sleeper):
    missing = "/nonexistent/bin/py-spy"
    monkeypatch.setenv(pyspy.ENV, missing)
    assert pyspy.pyspy_path() is None
    res = asyncio.run(pyspy.dump(python_sleeper))
    assert res["status"] == 503
    assert f"py-spy is not installed at {missing}" in res["error"]
    assert "pip install py-spy" in res["error"] and pyspy.ENV in res["error"]
    res = asyncio.run(pyspy.record(python_sleeper, 1, "speedscope"))
    assert res["status"] == 503 and missing in res["error"]


def test_an_unclassified_py_spy_failure_is_a_503_with_its_reason(
    tmp_path, monkeypatch, python_sleeper
):
    # A py-spy that fails for a reason of its own: its words reach the answer, as a 503.
    odd = tmp_path / "py-spy"
    odd.write_text("#!/bin/sh\necho 'Error: the moon is in the wrong phase' >&2\nexit 7\n")
    odd.chmod(0o755)
    monkeypatch.setenv(pyspy.ENV, str(odd))
    res = asyncio.run(pyspy.record(python_sleeper, 1, "speedscope"))
    assert res["status"] == 503
    assert "exit 7" in res["error"] and "the moon is in the wrong phase" in res["error"]


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root")
def test_denied_ptrace_says_what_to_change(tmp_path, monkeypatch, python_sleeper):
    # A real denial: the real py-spy, run as 'nobody' against a root-owned process.
    real = pyspy.pyspy_path()
    wrapper = tmp_path / "py-spy-as-nobody"
    wrapper.write_text(
        f'#!/bin/sh\nexec setpriv --reuid=nobody --regid=nogroup --clear-groups {real} "$@"\n'
    )
    wrapper.chmod(0o755)
    monkeypatch.setenv(pyspy.ENV, str(wrapper))
    res = asyncio.run(pyspy.dump(python_sleeper))
    assert res["status"] == 503, res
    assert f"py-spy may not trace pid {python_sleeper}" in res["error"]
    assert "Permission Denied" in res["error"]  # py-spy's own words
    assert "CAP_SYS_PTRACE" in res["error"] and "--cap-add SYS_PTRACE" in res["error"]
