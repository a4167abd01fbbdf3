"""Memory faults: a hog the worker node's memory monitor must kill (its usage comes from the
monitor's test hook, ``EMBER_MEMORY_MONITOR_USAGE_FILE``, so the machine is never filled),
and a deep chain of refs plus a ref nobody owns."""

from __future__ import annotations

import os

import psutil
from ember.tools.chaos.harness import HIGH_USAGE, LOW_USAGE, FaultError, Harness, Injected, poll

TIMEOUT = 120.0


def _write(path: str, text: str) -> None:
    # Written whole and renamed, so the monitor never reads half a number.
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def _kills(h: Harness) -> int:
    return h.cluster.raylet_call(h.far, "node_stats")["memory_monitor"]["kills_total"]


def memory_hog(h: Harness) -> Injected:
    hog_dir = os.path.join(h.work_dir, f"hog-{os.urandom(4).hex()}")
    os.makedirs(hog_dir)
    pid_file = os.path.join(hog_dir, "hog.pid")
    raylet = h.far.procs["raylet"].pid
    d = h.driver("hog", hog_dir)
    try:
        pid = poll(lambda: _read_pid(pid_file), TIMEOUT, "hog task running")
        before = _kills(h)
        _write(h.usage_file, HIGH_USAGE)
        try:
            poll(lambda: _kills(h) > before, 30, "kill by the memory monitor", interval=0.02)
        finally:
            # Low again at once, so the monitor takes no second victim.
            _write(h.usage_file, LOW_USAGE)
        poll(lambda: not _running(pid), 30, f"end of the hog's worker {pid}")
        d.expect("OOM_RAISED", TIMEOUT)
        d.expect("OK", TIMEOUT)  # the node ran a task after it
        if d.wait(30) != 0:
            raise FaultError(f"the hog's driver exited with {d.proc.returncode}: {d.tail()}")
        if not _running(raylet):
            raise FaultError("the worker node's raylet died")
        return Injected(f"hog {pid} killed with OutOfMemoryError")
    finally:
        open(os.path.join(hog_dir, "hog.gate"), "w").close()
        d.kill()


def _read_pid(path: str) -> int | None:
    try:
        with open(path) as f:
            text = f.read().strip()
    except OSError:
        return None
    return int(text) if text else None


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def ref_chain(h: Harness) -> Injected:
    d = h.driver("chain")
    try:
        d.expect("CHAIN_RELEASED", TIMEOUT)
        took = float(d.expect("UNOWNED_RAISED", TIMEOUT)[0])
        d.expect("OK", TIMEOUT)
        if d.wait(30) != 0:
            raise FaultError(f"the chain's driver exited with {d.proc.returncode}: {d.tail()}")
        return Injected(f"10,000-deep chain released; unowned get raised in {took:.2f} s")
    finally:
        d.kill()


MEMORY = [
    ("memory hog under the monitor", memory_hog),
    ("deep ref chain, unowned get", ref_chain),
]
