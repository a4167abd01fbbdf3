"""``ember demo``, the README's first command, run as a user runs it: a subprocess."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import psutil
from ember_test_utils import wait_until

EMBER = str(Path(sys.executable).with_name("ember"))
ROOT = Path(__file__).resolve().parents[1]


def _demo(*args: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.Popen(
        [EMBER, "demo", "--tasks", "300", *args],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )


def _no_descendants_left(kids: list[psutil.Process]) -> None:
    wait_until(
        lambda: not [k for k in kids if k.is_running() and k.status() != psutil.STATUS_ZOMBIE],
        timeout=20,
        message="the demo's node processes to exit",
    )


def test_demo_runs_the_workload_and_stops_its_node():
    proc = _demo("--hold", "0")
    out, _ = proc.communicate(timeout=240)
    assert proc.returncode == 0, out
    assert "300 tasks: sum of squares 8955050" in out  # sum(i*i for i in range(300))
    assert "counted 16 leaves" in out
    assert "An actor summed 0..499 = 124750" in out
    assert "came back on get as a ValueError" in out and "not a number" in out
    assert "the node stopped" in out


def test_demo_holds_its_dashboard_up_showing_the_run_until_sigterm():
    proc = _demo("--hold", "120")
    lines: list[str] = []
    try:
        url = None
        while url is None:  # the line naming the dashboard comes once the workload is done
            line = proc.stdout.readline()
            assert line, f"the demo ended early: {''.join(lines)}"
            lines.append(line)
            m = re.search(r"dashboard shows this run at (http://\S+?)/? \(", line)
            url = m and m.group(1)
        kids = psutil.Process(proc.pid).children(recursive=True)

        def failed_task_listed():
            with urllib.request.urlopen(
                f"{url}/api/tasks?filter=state=FAILED&limit=10", timeout=5
            ) as r:
                rows = json.load(r)["items"]
            return [t for t in rows if "parse_record" in t.get("name", t.get("func_name", ""))]

        # The run is visible while the node is held: its failed task with its error.
        rows = wait_until(failed_task_listed, timeout=60, message="the demo's failed task")
        assert "not a number" in json.dumps(rows)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0, "".join(lines) + out
        assert "the node stopped" in out
        _no_descendants_left(kids)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
