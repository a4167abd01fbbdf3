#!/usr/bin/env python3
"""Which objects an idle actor's copied pages were copied for, read from outside::

    .venv/bin/python benchmarks/cow_words.py [--actors 20] [--settle 3] [--top 40] [--names N]

Starts a node with N idle one-process actors (as ``actor_memory.py`` does), takes the one
with the median unique memory, and for each page it holds a private copy of (a page its
zygote has at the same address, in anonymous memory, glibc's heap and libpython's data),
compares the two copies word by word through ``/proc/PID/mem``. Each changed word is named
by the CPython object it most likely lies in: a word followed by a pointer to a type is an
object's reference count (the object's type is named); otherwise the nearest such header
below it, within 512 bytes, names the object the word is inside. Reports pages and words
by type: what the actor's private memory was copied for. Needs root (another process's
page frames and memory).

A page is counted once, for the type with the most changed words on it. A page copied with
no word changed was written and put back (a reference taken and let go: a call's function,
a constant); those are listed by what pymalloc's pool on them holds. ``--names N`` lists the
strings and functions whose reference count changed, with the net change (+1: the child
holds a new reference, e.g. a bound method holds its function; -1: it let go of one the
zygote had).
"""

from __future__ import annotations

import argparse
import os
import statistics
import struct
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from proc_memory import _EXCLUSIVE, _PAGE, _PFN, _PRESENT, _pagemap, mappings, uss_bytes  # noqa: E402

POOL = 16 * 1024  # pymalloc's pool size (CPython 3.10+, 64-bit)
BACK = 512  # how far below a changed word to look for its object's header


class Memory:
    """Reads another process's memory, caching pages."""

    def __init__(self, pid: int) -> None:
        self.f = open(f"/proc/{pid}/mem", "rb", buffering=0)
        self.pages: dict[int, bytes | None] = {}

    def page(self, addr: int) -> bytes | None:
        base = addr - addr % _PAGE
        if base not in self.pages:
            try:
                self.f.seek(base)
                self.pages[base] = self.f.read(_PAGE)
            except (OSError, ValueError, OverflowError):
                self.pages[base] = None
        return self.pages[base]

    def word(self, addr: int) -> int | None:
        if addr % 8:
            return None
        p = self.page(addr)
        if p is None:
            return None
        off = addr % _PAGE
        return struct.unpack_from("<Q", p, off)[0]

    def cstr(self, addr: int, limit: int = 80) -> str | None:
        out = bytearray()
        while len(out) < limit:
            p = self.page(addr + len(out))
            if p is None:
                return None
            off = (addr + len(out)) % _PAGE
            chunk = p[off:]
            end = chunk.find(b"\0")
            if end >= 0:
                out += chunk[:end]
                break
            out += chunk
        try:
            s = out.decode()
        except UnicodeDecodeError:
            return None
        return s if s.isprintable() and s else None


class TypeNamer:
    """Names a pointer if it points at a type object (whose own type is ``type`` or a
    metaclass of it)."""

    def __init__(self, mem: Memory) -> None:
        self.mem = mem
        self.cache: dict[int, str | None] = {}
        self.type_type = 0

    def name(self, ptr: int) -> str | None:
        if ptr < 4096 or ptr % 8 or ptr > 0x7FFFFFFFFFFF:
            return None
        if ptr in self.cache:
            return self.cache[ptr]
        result = None
        meta = self.mem.word(ptr + 8)
        if meta is not None and meta % 8 == 0 and meta > 4096:
            meta_meta = self.mem.word(meta + 8)
            if meta_meta == meta:  # ``type`` is its own type
                if not self.type_type:
                    self.type_type = meta
                result = self._tp_name(ptr) if meta == self.type_type else None
            elif meta_meta is not None and meta_meta == self.type_type:
                result = self._tp_name(ptr)
        self.cache[ptr] = result
        return result

    def _tp_name(self, tp: int) -> str | None:
        p = self.mem.word(tp + 24)
        return self.mem.cstr(p) if p else None


class Tally:
    """What the compared pages hold, by the object each changed word lies in."""

    def __init__(self) -> None:
        self.pages: Counter[str] = Counter()  # a page counts for its most changed object
        self.words: Counter[str] = Counter()
        self.unchanged: Counter[str] = Counter()  # pages written and put back, by pool
        self.counts: Counter[str] = Counter()  # "str 'name' +1": reference counts changed
        self.total = 0


def objects_of(child: int, zygote: int) -> Tally:
    """Compares each page ``child`` holds a private copy of with ``zygote``'s."""
    cm, zm = Memory(child), Memory(zygote)
    namer = TypeNamer(cm)
    tally = Tally()
    for m in mappings(child):
        if not (m.name in ("", "[heap]") or "libpython" in m.name) or "w" not in m.perms:
            continue
        try:
            mine = _pagemap(child, m.start, m.end)
            theirs = _pagemap(zygote, m.start, m.end)
        except OSError:
            continue
        region = "libpython" if "libpython" in m.name else (m.name or "anon")
        for i, entry in enumerate(mine):
            if not (entry & _PRESENT and entry & _EXCLUSIVE):
                continue
            other = theirs[i] if i < len(theirs) else 0
            if not (other & _PRESENT) or (other & _PFN) == (entry & _PFN):
                continue  # not a copy of the zygote's page: allocated anew
            base = m.start + i * _PAGE
            a, b = cm.page(base), zm.page(base)
            if a is None or b is None:
                continue
            tally.total += 1
            on_page: Counter[str] = Counter()
            for off in range(0, _PAGE, 8):
                if a[off : off + 8] == b[off : off + 8]:
                    continue
                kind = _classify(cm, namer, base + off, region)
                on_page[kind] += 1
                tally.words[kind] += 1
                if kind in ("str (refcount)", "function (refcount)"):
                    mine_n = struct.unpack_from("<q", a, off)[0]
                    delta = mine_n - struct.unpack_from("<q", b, off)[0]
                    tally.counts[f"{_name_of(cm, kind, base + off)} {delta:+d}"] += 1
            if on_page:
                tally.pages[on_page.most_common(1)[0][0]] += 1
            else:
                tally.pages["(no word differs)"] += 1
                tally.unchanged[_pool_types(cm, namer, base) or "?"] += 1
    return tally


def _name_of(mem: Memory, kind: str, addr: int) -> str:
    """A str's text, or a function's ``__qualname__`` (CPython 3.11's layouts)."""
    if kind.startswith("str"):
        # PyASCIIObject: refcnt, type, length, hash, state, wstr, then the text
        length = mem.word(addr + 16) or 0
        return f"str {mem.cstr(addr + 48, min(length, 60))!r}" if length else "str ''"
    qualname = mem.word(addr + 40) or 0  # PyFunctionObject: ..., name, qualname
    length = (mem.word(qualname + 16) or 0) if qualname else 0
    return f"function {mem.cstr(qualname + 48, min(length, 80))}" if length else "function"


def report(tally: Tally, top: int, names: int) -> None:
    print(f"copied pages compared: {tally.total} ({tally.total * _PAGE // 1024} KiB)\n")
    print("| object (type) | pages | changed words |")
    print("| --- | --- | --- |")
    for kind, n in tally.pages.most_common(top):
        print(f"| {kind} | {n} | {tally.words[kind]} |")
    print("\nPages copied with no word changed (written, then put back), by the pool:\n")
    print("| pymalloc pool: block size, objects on the page | pages |")
    print("| --- | --- |")
    for kind, n in tally.unchanged.most_common(top):
        print(f"| {kind} | {n} |")
    if names:
        print("\nReference counts changed, net (the child's minus the zygote's):\n")
        for name in sorted(tally.counts)[:names]:
            print(f"  {name}")


def _pool_types(mem: Memory, namer: TypeNamer, base: int) -> str:
    """If the page at ``base`` lies in a pymalloc pool (16 KiB, its header first), the types
    of the objects in its blocks on that page (the two most common), with the block size."""
    pool = base & ~(POOL - 1)
    # pool_header: ref, freeblock, nextpool, prevpool (8 B each), arenaindex, szidx (4 B each)
    word = mem.word(pool + 32)
    if word is None:
        return ""
    size = ((word >> 32) + 1) * 16
    if not 16 <= size <= 512:
        return "not a pymalloc pool"
    types: Counter[str] = Counter()
    first = pool + 48 + -(-(base - pool - 48) // size) * size if base > pool else pool + 48
    for addr in range(first, base + _PAGE - size + 1, size):
        tp = namer.name(mem.word(addr + 8) or 0) or namer.name(mem.word(addr + 24) or 0)
        types[tp or "?"] += 1
    top2 = ", ".join(f"{k} x{v}" for k, v in types.most_common(2))
    return f"{size} B blocks: {top2}"


def _classify(mem: Memory, namer: TypeNamer, addr: int, region: str) -> str:
    tp = namer.name(mem.word(addr + 8) or 0)
    if tp is not None:
        return f"{tp} (refcount)"
    for back in range(8, BACK + 8, 8):
        tp = namer.name(mem.word(addr - back + 8) or 0)
        if tp is not None:
            refcnt = mem.word(addr - back) or 0
            if 0 < refcnt < 1 << 32:
                return f"{tp} (body +{back})" if back <= 64 else f"{tp} (body)"
    return f"? in {region}"


def _zygote_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        stat = f.read()
    return int(stat[stat.rindex(")") + 2 :].split()[1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--actors", type=int, default=20)
    p.add_argument("--settle", type=float, default=3.0)
    p.add_argument("--top", type=int, default=40)
    p.add_argument("--names", type=int, default=0, help="list this many changed counts")
    p.add_argument("--pid", type=int, default=0, help="an actor already running")
    args = p.parse_args()
    if args.pid:
        report(objects_of(args.pid, _zygote_of(args.pid)), args.top, args.names)
        return
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import ember

    ember.init(num_cpus=2, include_dashboard=False)
    try:

        @ember.remote(num_cpus=0)
        class Idle:
            def ping(self) -> int:
                return os.getpid()

        actors = [Idle.remote() for _ in range(args.actors)]
        pids = ember.get([a.ping.remote() for a in actors], timeout=120)
        time.sleep(args.settle)
        by_uss = sorted(pids, key=uss_bytes)
        pid = by_uss[len(by_uss) // 2]
        print(f"median actor {pid}: USS {statistics.median(map(uss_bytes, pids)) / 2**20:.2f} MiB")
        report(objects_of(pid, _zygote_of(pid)), args.top, args.names)
    finally:
        ember.shutdown()


if __name__ == "__main__":
    main()
