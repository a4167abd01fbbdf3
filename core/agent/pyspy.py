"""Stacks and profiles with py-spy (a dependency), run by the agent on its own node.

py-spy reads another process's memory with ptrace: it works as root, or as the same user
when ``kernel.yama.ptrace_scope`` is 0; no sudo. When ptrace is denied the error says which
setting forbids it and how to change it (Ray #31109).

Every failure is classified (``classify``) into an HTTP status the dashboard answers with and
a message saying what to do: 404 the process is gone, 422 it is not a Python process py-spy
can read, 503 py-spy is missing, denied, stuck or failed for a reason of its own. None is a
500: a failed sample is the node's condition, not the dashboard's bug.

``EMBER_PYSPY`` names the py-spy binary to use (default: the one beside this interpreter,
then ``PATH``).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import tempfile
from typing import Any

_YAMA = "/proc/sys/kernel/yama/ptrace_scope"
ENV = "EMBER_PYSPY"


def pyspy_path() -> str | None:
    """The py-spy binary to run, or None when there is none (``not_installed`` says why)."""
    chosen = os.environ.get(ENV)
    if chosen:
        return chosen if os.access(chosen, os.X_OK) else None
    beside = os.path.join(os.path.dirname(sys.executable), "py-spy")
    return beside if os.access(beside, os.X_OK) else shutil.which("py-spy")


def not_installed() -> str:
    """The message for a node without a usable py-spy: where it looked and what to do."""
    chosen = os.environ.get(ENV)
    if chosen:
        return (
            f"py-spy is not installed at {chosen} (set by {ENV}): no executable file there; "
            f"install it with 'pip install py-spy' or point {ENV} at the py-spy binary"
        )
    return (
        "py-spy is not installed on this node: pip install py-spy (into the environment "
        f"the node runs from), or set {ENV} to the py-spy binary"
    )


def _reason(stderr: str) -> str:
    """py-spy's own one-line reason, without the Rust backtrace it prints after it."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    for ln in lines:
        if ln.lower().startswith(("permission denied", "error:")):
            return ln
    return next((ln for ln in lines if not ln[:1].isdigit() and ln != "Stack backtrace:"), "")


def explain_denied(pid: int, stderr: str) -> str:
    try:
        scope = open(_YAMA).read().strip()
    except OSError:
        scope = None
    why = f"py-spy may not trace pid {pid}: {_reason(stderr) or 'permission denied'}. "
    owner = _owner(pid)
    if os.geteuid() != 0 and scope not in (None, "0"):
        why += (
            f"{_YAMA} is {scope}, which lets only root (or CAP_SYS_PTRACE) trace other processes; "
            f"run 'sysctl kernel.yama.ptrace_scope=0' as root, or run the node as root."
        )
    elif os.geteuid() != 0 and owner is not None and owner != os.geteuid():
        why += (
            f"the process belongs to uid {owner} and the node runs as uid {os.geteuid()}; only "
            "root may trace another user's process: start the node as that user, or as root."
        )
    else:
        why += (
            "ptrace is forbidden here (a container without CAP_SYS_PTRACE, or a seccomp "
            "profile); start the container with --cap-add SYS_PTRACE."
        )
    return why


TIMED_OUT = -1  # _run's exit code for a py-spy that was killed at its deadline


async def _run(args: list[str], timeout: float) -> tuple[int, str, str]:
    try:
        proc = await asyncio.create_subprocess_exec(
            *args,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            stdin=asyncio.subprocess.DEVNULL,
        )
    except OSError as e:  # there but not runnable (a broken file, no exec permission)
        return 127, "", f"Error: could not run py-spy at {args[0]}: {e}"
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return TIMED_OUT, "", f"py-spy did not finish within {timeout:g} s"
    return proc.returncode or 0, out.decode(errors="replace"), err.decode(errors="replace")


def classify(pid: int, code: int, err: str) -> tuple[str, int]:
    """(message, HTTP status) for a py-spy run that failed; never a 5xx other than 503."""
    low = err.lower()
    reason = _reason(err)
    if "permission" in low or "operation not permitted" in low:
        return explain_denied(pid, err), 503
    if "no such process" in low or "failed to find process" in low or not _alive(pid):
        return f"process {pid} no longer exists", 404
    if "failed to find python" in low or "not a python" in low:
        return (
            f"pid {pid} is not a Python process py-spy can read ({reason}); "
            "pick a worker's pid from /api/workers"
        ), 422
    if code == TIMED_OUT:
        return f"{err}; the process may be stuck in a system call, try again", 503
    return (
        f"py-spy failed on pid {pid} (exit {code}): {reason or 'no message'}; "
        "the node could not sample it, try again or run py-spy on the node by hand"
    ), 503


def _alive(pid: int) -> bool:
    return os.path.exists(f"/proc/{pid}")


def _owner(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


async def dump(pid: int, timeout: float = 20.0) -> dict[str, Any]:
    """``{"pid", "threads": [{"thread_id", "name", "active", "frames": [...]}], "error"}``."""
    exe = pyspy_path()
    if exe is None:
        return {"pid": pid, "threads": [], "error": not_installed(), "status": 503}
    code, out, err = await _run([exe, "dump", "--json", "--pid", str(pid)], timeout)
    if code != 0:
        msg, status = classify(pid, code, err)
        return {"pid": pid, "threads": [], "error": msg, "status": status}
    try:
        raw = json.loads(out)
    except ValueError:
        return {
            "pid": pid,
            "threads": [],
            "error": f"py-spy printed no JSON: {out[:200]!r}",
            "status": 503,
        }
    threads = [
        {
            "thread_id": t.get("thread_id"),
            "name": t.get("thread_name"),
            "active": t.get("active"),
            "owns_gil": t.get("owns_gil"),
            "frames": [
                {"function": f.get("name"), "file": f.get("filename"), "line": f.get("line")}
                for f in t.get("frames", [])
            ],
        }
        for t in raw
    ]
    return {"pid": pid, "threads": threads, "error": None}


async def record(pid: int, duration: int, fmt: str) -> dict[str, Any]:
    """``{"data": str}`` (speedscope JSON or SVG), or ``{"error", "status"}``."""
    exe = pyspy_path()
    if exe is None:
        return {"error": not_installed(), "status": 503}
    if not _alive(pid):
        return {"error": f"process {pid} does not exist on this node", "status": 404}
    with tempfile.TemporaryDirectory(prefix="ember-profile-") as tmp:
        out = os.path.join(tmp, "profile")
        args = [
            exe,
            "record",
            "--pid",
            str(pid),
            "--duration",
            str(duration),
            "--rate",
            "100",
            "--format",
            "speedscope" if fmt == "speedscope" else "flamegraph",
            "--output",
            out,
            "--nonblocking",
            # Idle threads too: a worker blocked in get() or sleeping is what one wants to see.
            "--idle",
        ]
        code, _, err = await _run(args, duration + 20)
        if code != 0 or not os.path.exists(out):
            msg, status = classify(pid, code, err)
            return {"error": msg, "status": status}
        with open(out, encoding="utf-8", errors="replace") as f:
            return {"data": f.read()}
