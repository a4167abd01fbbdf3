"""Memory of a process tree, read from /proc with the standard library only (the benchmark
scripts run under Ray's interpreter too, which may lack psutil).

``tree_pids(root)`` is ``root`` and its descendants by parent pid; ``uss_bytes(pid)`` is a
process's unique set size: its private pages (``Private_*`` in ``smaps_rollup``), the memory
freed if it ended, so pages shared by forked workers count once.
"""

from __future__ import annotations

import os


def children_map() -> dict[int, list[int]]:
    """``{parent pid: [child pids]}`` of every process now."""
    kids: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        # The command name (field 2) may hold spaces and parentheses: read after its end.
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        kids.setdefault(ppid, []).append(int(name))
    return kids


def tree_pids(root: int) -> list[int]:
    kids, out, todo = children_map(), [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(kids.get(pid, ()))
    return out


def uss_bytes(pid: int) -> int:
    total = 0
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Private_"):
                    total += int(line.split()[1]) * 1024
    except (OSError, ValueError):
        return 0  # it ended between the listing and the read
    return total
