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


def rollup_kib(pid: int) -> dict[str, int]:
    """``/proc/PID/smaps_rollup`` as {field: kB}, plus ``USS`` (the sum of ``Private_*``,
    what psutil's ``memory_full_info().uss`` is); {} once the process has ended."""
    out: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                parts = line.split()
                if len(parts) == 3 and parts[2] == "kB":
                    out[parts[0].rstrip(":")] = int(parts[1])
    except (OSError, ValueError):
        return {}
    out["USS"] = sum(v for k, v in out.items() if k.startswith("Private_"))
    return out


class Mapping:
    """One line of ``/proc/PID/maps`` with its ``smaps`` counters (kB)."""

    __slots__ = ("start", "end", "perms", "name", "kib")

    def __init__(self, start: int, end: int, perms: str, name: str) -> None:
        self.start, self.end, self.perms, self.name = start, end, perms, name
        self.kib: dict[str, int] = {}

    @property
    def private_kib(self) -> int:
        return self.kib.get("Private_Clean", 0) + self.kib.get("Private_Dirty", 0)


def mappings(pid: int) -> list[Mapping]:
    """Every mapping of ``pid`` with its Rss, Pss, Private_* ... from ``/proc/PID/smaps``."""
    out: list[Mapping] = []
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            head = line.split(None, 5)
            if "-" in head[0] and len(head) >= 5 and not head[0].endswith(":"):
                lo, hi = head[0].split("-")
                name = head[5].strip() if len(head) > 5 else ""
                out.append(Mapping(int(lo, 16), int(hi, 16), head[1], name))
            elif len(head) == 3 and head[2] == "kB" and out:
                out[-1].kib[head[0].rstrip(":")] = int(head[1])
    return out


_PAGE = os.sysconf("SC_PAGE_SIZE")
_PRESENT, _EXCLUSIVE = 1 << 63, 1 << 56
_PFN = (1 << 55) - 1


def _pagemap(pid: int, start: int, end: int) -> list[int]:
    n = (end - start) // _PAGE
    with open(f"/proc/{pid}/pagemap", "rb") as f:
        f.seek(start // _PAGE * 8)
        data = f.read(n * 8)
    return list(memoryview(data).cast("Q"))


def private_origin_kib(pid: int, parent: int, m: Mapping) -> tuple[int, int]:
    """Of ``pid``'s pages in ``m`` mapped by it alone: (kB that are copies of a page its fork
    parent ``parent`` has at the same address, kB the parent has no page for). Copies are
    what copy-on-write cost (a reference count written, a free slot reused); the rest is
    memory the child allocated anew. Reading frame numbers needs root; (0, 0) without."""
    try:
        mine = _pagemap(pid, m.start, m.end)
        theirs = _pagemap(parent, m.start, m.end)
    except OSError:
        return 0, 0
    copied = new = 0
    for i, entry in enumerate(mine):
        if entry & _PRESENT and entry & _EXCLUSIVE:
            other = theirs[i] if i < len(theirs) else 0
            if other & _PRESENT and (other & _PFN) != (entry & _PFN):
                copied += 1
            else:
                new += 1
    kib = _PAGE // 1024
    return copied * kib, new * kib


def thread_stack_pointers(pid: int) -> dict[int, int]:
    """{thread id: its stack pointer} of the threads of ``pid`` blocked in a system call
    (``/proc/PID/task/TID/syscall``; needs ptrace rights, so root or the same user)."""
    out: dict[int, int] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/syscall") as f:
                fields = f.read().split()
        except OSError:
            continue
        if len(fields) >= 8:  # "nr arg1 .. arg6 sp pc" while in a system call
            out[int(tid)] = int(fields[7], 16)
    return out
