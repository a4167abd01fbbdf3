"""``stop_sessions_under``: several nodes' processes stopped in one pass (what
fake_multinode's ``terminate_nodes`` uses for a tick's stops), gently then by force, and
nothing outside the named directories touched. The processes stand in for a node's: their
command lines are an Ember daemon's, as ``find_ember_processes`` reads them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import psutil
from ember.session_processes import stop_sessions_under

SLEEP = "import time; time.sleep(60)"
STUBBORN = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"


def _node_process(session_dir: str, code: str = SLEEP) -> subprocess.Popen:
    argv = [sys.executable, "-c", code, "-m", "ember.raylet.raylet", "--session-dir", session_dir]
    return subprocess.Popen(argv)


def test_the_named_nodes_stop_in_one_pass_and_the_others_run_on(tmp_path) -> None:
    a, b, c = (str(tmp_path / name) for name in ("fake-aaaa", "fake-bbbb", "fake-cccc"))
    procs = {
        "a": _node_process(a + "/session_1"),
        "b": _node_process(b + "/session_1", STUBBORN),  # ignores SIGTERM: killed after grace
        "c": _node_process(c + "/session_1"),
    }
    try:
        deadline = time.monotonic() + 10
        # A process caught between fork and exec shows an empty command line: not yet.
        while not all(
            (psutil.Process(p.pid).cmdline() or [""])[-1].endswith("session_1")
            for p in procs.values()
        ):
            assert time.monotonic() < deadline
            time.sleep(0.02)
        time.sleep(0.2)  # the stubborn one has set its handler
        # The shared memory each session recorded: a killed raylet leaves it; it goes too,
        # except the untouched node's.
        arenas = {}
        for name, d in (("b", b), ("c", c)):
            arenas[name] = f"/dev/shm/ember-{os.getpid()}-stoptest{name}"
            open(arenas[name], "wb").close()
            os.makedirs(d + "/session_1", exist_ok=True)
            with open(d + "/session_1/node.json", "w") as f:
                json.dump({"arena_path": arenas[name]}, f)
        assert stop_sessions_under([a, b], grace=0.5) == {}
        assert not os.path.exists(arenas["b"]) and os.path.exists(arenas["c"])
        os.unlink(arenas["c"])
        # Gone (psutil reaped them, so their exit codes are not ours to read), the one that
        # ignored SIGTERM too.
        for p in (procs["a"], procs["b"]):
            assert not psutil.pid_exists(p.pid) or psutil.Process(p.pid).status() == "zombie"
        assert procs["c"].poll() is None  # another node's: untouched
        assert stop_sessions_under([], grace=0.5) == {}
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
            p.wait()
