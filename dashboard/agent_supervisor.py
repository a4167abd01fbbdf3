"""Keeps the node's agent running: starts it, and starts it again when it dies (issue 4 §1).

A separate, stdlib-only process (about 10 MB; it must not import ``ember``) so the agent can crash or be killed without taking
its restart logic along. Gives up after ``MAX_RESTARTS`` deaths within a minute, logging why.
SIGTERM stops the agent and then the supervisor.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

MAX_RESTARTS = 5
WINDOW = 60.0


def _die_with_parent(parent_pid: int) -> None:
    # ember.process_util's, inlined: importing ember here would cost ~15 MB of modules.
    import ctypes

    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass
    if os.getppid() != parent_pid:
        os.kill(os.getpid(), signal.SIGTERM)


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    ready_fd, parent_pid, session_dir = -1, 0, ""
    if "--ready-fd" in argv:
        i = argv.index("--ready-fd")
        ready_fd = int(argv[i + 1])
        del argv[i : i + 2]
    if "--parent-pid" in argv:
        i = argv.index("--parent-pid")
        parent_pid = int(argv[i + 1])
        del argv[i : i + 2]
    if "--process-name" in argv:
        i = argv.index("--process-name")
        del argv[i : i + 2]
    watch_pid = 0  # the node's raylet: a daemon node's agent ends with it (no parent ties them)
    if "--watch-pid" in argv:
        i = argv.index("--watch-pid")
        watch_pid = int(argv[i + 1])
        del argv[i : i + 2]
    if "--session-dir" in argv:
        session_dir = argv[argv.index("--session-dir") + 1]
    if parent_pid:
        _die_with_parent(parent_pid)
    log = open(os.path.join(session_dir, "logs", "agent_supervisor.log"), "a", buffering=1)
    stopping = False
    child: subprocess.Popen | None = None

    def stop(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True
        if child is not None and child.poll() is None:
            child.terminate()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    deaths: list[float] = []
    first = True
    while not stopping:
        extra = ["--parent-pid", str(os.getpid())]
        if first and ready_fd >= 0:
            extra += ["--ready-fd", str(ready_fd)]
        child = subprocess.Popen(
            [sys.executable, "-m", "ember.dashboard.agent", *argv, *extra],
            pass_fds=(ready_fd,) if first and ready_fd >= 0 else (),
            stdin=subprocess.DEVNULL,
        )
        if first and ready_fd >= 0:
            os.close(ready_fd)
        first = False
        code = _wait(child, watch_pid)
        if code is None:  # the raylet is gone: so is the node
            print(f"{time.ctime()} the raylet (pid {watch_pid}) exited; stopping", file=log)
            stop(signal.SIGTERM, None)
        if stopping:
            break
        now = time.time()
        deaths = [t for t in deaths if now - t < WINDOW] + [now]
        print(f"{time.ctime()} agent pid {child.pid} exited with {code}", file=log)
        if len(deaths) > MAX_RESTARTS:
            print(
                f"{time.ctime()} the agent died {len(deaths)} times in {WINDOW:.0f} s; "
                "not restarting it (see agent.log / agent.err)",
                file=log,
            )
            return
        time.sleep(min(0.5 * len(deaths), 3.0))
    if child is not None:
        try:
            child.wait(5.0)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def _wait(child: subprocess.Popen, watch_pid: int) -> int | None:
    """The child's exit code, or None as soon as ``watch_pid`` has exited."""
    while True:
        try:
            return child.wait(1.0 if watch_pid else None)
        except subprocess.TimeoutExpired:
            if not _alive(watch_pid):
                return None


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")  # a zombie has exited; only its parent has not reaped it


if __name__ == "__main__":
    main()
