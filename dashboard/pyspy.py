"""Stacks and profiles with py-spy (a dependency), run by the agent on its own node.

py-spy reads another process's memory with ptrace: it works as root, or as the same user
when ``kernel.yama.ptrace_scope`` is 0; no sudo. When ptrace is denied the error says which
setting forbids it and how to change it (Ray #31109).
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


def pyspy_path() -> str | None:
    beside = os.path.join(os.path.dirname(sys.executable), "py-spy")
    return beside if os.access(beside, os.X_OK) else shutil.which("py-spy")


def explain_denied(pid: int, stderr: str) -> str:
    try:
        scope = open(_YAMA).read().strip()
    except OSError:
        scope = None
    why = f"py-spy may not trace pid {pid}: {stderr.strip().splitlines()[-1] if stderr.strip() else 'permission denied'}. "
    if os.geteuid() != 0 and scope not in (None, "0"):
        why += (
            f"{_YAMA} is {scope}, which lets only root (or CAP_SYS_PTRACE) trace other processes; "
            f"run 'sysctl kernel.yama.ptrace_scope=0' as root, or run the node as root."
        )
    else:
        why += (
            "ptrace is forbidden here (a container without CAP_SYS_PTRACE, or a seccomp "
            "profile); start the container with --cap-add SYS_PTRACE."
        )
    return why


async def _run(args: list[str], timeout: float) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        stdin=asyncio.subprocess.DEVNULL,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return -1, "", f"py-spy did not finish within {timeout:g} s"
    return proc.returncode or 0, out.decode(errors="replace"), err.decode(errors="replace")


def _error(pid: int, code: int, err: str) -> tuple[str, int]:
    low = err.lower()
    if "permission" in low or "operation not permitted" in low:
        return explain_denied(pid, err), 503
    if (
        "no such process" in low
        or "failed to find process" in low
        or not os.path.exists(f"/proc/{pid}")
    ):
        return f"process {pid} no longer exists", 404
    return f"py-spy failed on pid {pid} (exit {code}): {err.strip()[-500:]}", 500


async def dump(pid: int, timeout: float = 20.0) -> dict[str, Any]:
    """``{"pid", "threads": [{"thread_id", "name", "active", "frames": [...]}], "error"}``."""
    exe = pyspy_path()
    if exe is None:
        return {"pid": pid, "threads": [], "error": "py-spy is not installed: pip install py-spy"}
    code, out, err = await _run([exe, "dump", "--json", "--pid", str(pid)], timeout)
    if code != 0:
        return {"pid": pid, "threads": [], "error": _error(pid, code, err)[0]}
    try:
        raw = json.loads(out)
    except ValueError:
        return {"pid": pid, "threads": [], "error": f"py-spy printed no JSON: {out[:200]!r}"}
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
        return {"error": "py-spy is not installed: pip install py-spy", "status": 503}
    if not os.path.exists(f"/proc/{pid}"):
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
            msg, status = _error(pid, code, err)
            return {"error": msg, "status": status}
        with open(out, encoding="utf-8", errors="replace") as f:
            return {"data": f.read()}
