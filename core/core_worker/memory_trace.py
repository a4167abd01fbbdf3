"""What a worker holds beyond its fork parent: its threads, the modules it imported since the
fork and, when asked for, the Python allocations it made and the functions it ran since
(``benchmarks/actor_memory.py`` reads them through an actor method).

Off by default. A node started with ``EMBER_WORKER_MEMORY_TRACE=<frames>`` in its environment
has each forked worker note ``sys.modules``, start ``tracemalloc`` (keeping that many frames
per allocation) and a profile hook on every thread right after the fork: that costs every
worker memory and time, so it is for measuring only. ``report()`` works either way; without
the variable it has no modules, allocations or functions to say.
"""

from __future__ import annotations

import gc
import os
import sys
import threading
import types
from typing import Any

ENV = "EMBER_WORKER_MEMORY_TRACE"
_modules_at_fork: frozenset[str] | None = None
_stopped = False  # report() ends the recording of calls
# {id(code): (code, its module's name)} of the Python functions run since the fork
_called: dict[int, tuple[Any, str]] = {}


def start_after_fork() -> None:
    """In a freshly forked worker (the zygote's child), before anything else runs."""
    value = os.environ.get(ENV, "")
    if not value:
        return
    global _modules_at_fork
    _modules_at_fork = frozenset(sys.modules)
    import tracemalloc

    tracemalloc.start(int(value) if value.isdigit() and int(value) > 0 else 1)

    def on_event(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and not _stopped:
            _called[id(frame.f_code)] = (frame.f_code, frame.f_globals.get("__name__", ""))

    sys.setprofile(on_event)
    threading.setprofile(on_event)


def threads() -> list[dict[str, Any]]:
    """Every OS thread of this process: its id and, for Python's, its name and whether it
    is a daemon; a thread Python did not start (a C library's own) has no name."""
    by_tid = {t.native_id: t for t in threading.enumerate()}
    # A forked child's main thread keeps its parent's native id in Python's record.
    by_tid[os.getpid()] = threading.main_thread()
    out = []
    for tid in sorted(int(t) for t in os.listdir("/proc/self/task")):
        t = by_tid.get(tid)
        out.append({"tid": tid, "name": t.name if t else "", "daemon": bool(t and t.daemon)})
    return out


def hot_functions() -> list[str]:
    """``module:qualname`` of each function run since the fork, or bound to an object since
    (a bound method holds its function: the handlers a worker registers as it starts), whose
    module the fork parent had imported (what ``ember.raylet.hot_code`` can lay out together
    in the zygote: either writes the function's reference count, copying its page)."""
    global _stopped
    _stopped = True
    if _modules_at_fork is None:
        return []
    seen = list(_called.values())
    # The zygote froze what it made, so the collector lists only the child's own objects.
    for obj in gc.get_objects():
        if type(obj) is types.MethodType and type(obj.__func__) is types.FunctionType:
            fn = obj.__func__
            seen.append((fn.__code__, fn.__globals__.get("__name__", "")))
    return sorted(
        {
            f"{module}:{code.co_qualname}"
            for code, module in seen
            # __main__: the user's functions, unpickled into the zygote's main module
            if module in _modules_at_fork and module not in ("__main__", __name__)
        }
    )


def report(top: int = 15) -> dict[str, Any]:
    """{threads, modules imported since the fork (or None), allocations since the fork:
    total bytes and the ``top`` largest sites by line (or None)}."""
    out: dict[str, Any] = {"threads": threads(), "modules": None, "allocations": None}
    if _modules_at_fork is not None:
        out["modules"] = sorted(set(sys.modules) - _modules_at_fork)
    global _stopped
    _stopped = True
    if _called:
        # Each function run writes its code object's reference count: the pages they lie
        # on are copies. By file: functions run, and distinct 4 KiB pages their code spans.
        codes = [code for code, _ in list(_called.values())]
        by_file: dict[str, list[Any]] = {}
        for code in codes:
            by_file.setdefault(code.co_filename, []).append(code)
        rows = []
        for name, in_file in by_file.items():
            pages = {id(c) >> 12 for c in in_file}
            rows.append({"file": name, "functions": len(in_file), "pages": len(pages)})
        rows.sort(key=lambda r: -r["pages"])
        all_pages = {id(c) >> 12 for c in codes}
        out["called"] = {"functions": len(codes), "pages": len(all_pages), "top": rows[:top]}
    # Imported only if tracing started: importing it here would add its modules' pages to
    # the very memory this report is beside.
    tracemalloc = sys.modules.get("tracemalloc")
    if tracemalloc is not None and tracemalloc.is_tracing():
        snap = tracemalloc.take_snapshot().filter_traces(
            [tracemalloc.Filter(False, tracemalloc.__file__)]
        )
        stats = snap.statistics("lineno")
        out["allocations"] = {
            "bytes": sum(s.size for s in stats),
            "count": sum(s.count for s in stats),
            "top": [
                {"where": str(s.traceback[0]), "bytes": s.size, "count": s.count}
                for s in stats[:top]
            ],
            "by_file": [
                {"where": str(s.traceback[0].filename), "bytes": s.size, "count": s.count}
                for s in snap.statistics("filename")[:top]
            ],
        }
    return out
