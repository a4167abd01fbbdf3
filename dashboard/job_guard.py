"""The leader of a job entrypoint's process group: it runs the entrypoint with the shell and
ends the whole group when the supervisor that started it dies.

The supervisor (``job_supervisor.py``) runs in a worker, which its raylet takes down with it
(SIGKILL, ``die_with_parent``) when the node dies. The entrypoint runs in a session of its own
so that stop can signal all of it, which also means nothing else ends it: without this guard a
job's processes would outlive its node's death (measured: ``sleep 600`` ran on after its
raylet was SIGKILLed). Linux's PR_SET_PDEATHSIG would only reach the one child, and fires
when the creating *thread* exits; the guard instead notices its parent change (it was
reparented) and SIGKILLs its group, itself included.

Run as a script, by path, with ``python -S`` (the standard library only: no ``ember`` import;
measured ~36 ms to start and run ``true``, ~11 MiB of RSS per running job): ``job_guard.py <supervisor pid> <entrypoint>``. It exits as the shell did,
by the same signal when the shell was killed by one, so the supervisor reads the shell's own
exit status.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

POLL_S = 0.2  # how soon after its supervisor's death the group goes


def main(argv: list[str]) -> int:
    parent, entrypoint = int(argv[1]), argv[2]
    # Stop signals the whole group: the guard outlives them to report the shell's exit (and
    # the supervisor's SIGKILL after the grace ends it anyway). A Python handler, not SIG_IGN,
    # which the shell would inherit across exec.
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: None)
    if os.getppid() != parent:  # the supervisor died while the guard started
        os.killpg(0, signal.SIGKILL)
    child = subprocess.Popen(entrypoint, shell=True)
    while True:
        try:
            code = child.wait(POLL_S)
            break
        except subprocess.TimeoutExpired:
            pass
        if os.getppid() != parent:
            os.killpg(0, signal.SIGKILL)
    if code < 0:  # killed by a signal: die by it too
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        time.sleep(1)
    return code & 0xFF


if __name__ == "__main__":
    sys.exit(main(sys.argv))
