"""``python -m ember.tools.chaos``: the chaos and abuse suite's runner and its table.

Each fault kind runs ``--rounds`` times (once with ``--quick``) on one two-node cluster; a
round counts as survived when its fault's own checks pass and the probe workload completes
afterwards. After each round every driver has ended, and the leak measures are taken: store
bytes above the idle baseline on every node, arena files in /dev/shm of nodes no longer
running, processes of ended drivers or dead nodes. Whatever happens (Ctrl-C, SIGTERM, an
error of the suite itself), every process it started is stopped and its /dev/shm files are
removed; what had to be removed by force then counts as leaked.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

from ember.tools.chaos import faults_drivers, faults_kill, faults_memory, faults_peers
from ember.tools.chaos.harness import FaultError, Harness, Injected, Row

Fault = Callable[[Harness], Injected]


def faults() -> list[tuple[str, Fault]]:
    """Every fault kind, in the order they run (the raylet's kill replaces the worker node,
    so it comes last of the kills)."""
    out: list[tuple[str, Fault]] = []
    for name, inject, fragile in faults_kill.KILLS:
        out.append((name, lambda h, i=inject, f=fragile: faults_kill.run_kill(h, i, f)))
    for name, mode in faults_drivers.DRIVER_ENDS:
        out.append((name, lambda h, m=mode: faults_drivers.driver_ends(h, m)))
    out += faults_peers.PEERS
    out += faults_memory.MEMORY
    return out


def run_round(h: Harness, row: Row, fault: Fault, log: Callable[[str], None]) -> None:
    started = time.monotonic()
    row.injected += 1
    survived = False
    try:
        injected = fault(h)
        if injected.refused is not None:
            row.refused = (row.refused or 0) + injected.refused
        row.bytes_leaked += injected.leaked
        h.probe()
        survived = True
        log(f"  {row.fault}: {injected.what}: survived")
    except FaultError as e:
        row.failures.append(str(e))
        log(f"  {row.fault}: NOT SURVIVED: {e}")
    finally:
        for d in h.drivers:
            d.kill()
        h.drivers.clear()
    # Leaks, once every driver has ended.
    leaked = h.settle()
    row.bytes_leaked += leaked
    strays = h.stray_processes()
    shm = h.stray_shm()
    row.procs_left += len(strays)
    row.shm_left += len(shm)
    for what, items in (("bytes", [leaked] if leaked else []), ("processes", strays)):
        if items:
            row.failures.append(f"{what} left: {items}")
            log(f"  {row.fault}: LEAKED {what}: {items}")
    if shm:
        row.failures.append(f"/dev/shm files left: {shm}")
    if survived:
        row.survived += 1
    row.seconds += time.monotonic() - started


COLUMNS = [
    ("fault", 32),
    ("injected", 8),
    ("survived", 8),
    ("bytes leaked", 12),
    ("/dev/shm left", 13),
    ("procs left", 10),
    ("refused", 7),
    ("seconds", 7),
]


def _cells(row: Row) -> list[str]:
    refused = "-" if row.refused is None else str(row.refused)
    return [
        row.fault,
        str(row.injected),
        str(row.survived),
        str(row.bytes_leaked),
        str(row.shm_left),
        str(row.procs_left),
        refused,
        f"{row.seconds:.0f}",
    ]


def table(rows: list[Row], total: Row) -> str:
    def line(cells: list[str]) -> str:
        first = cells[0].ljust(COLUMNS[0][1])
        rest = [c.rjust(w) for c, (_, w) in zip(cells[1:], COLUMNS[1:], strict=True)]
        return "  ".join([first, *rest])

    out = [line([name for name, _ in COLUMNS])]
    out.append(line(["-" * w for _, w in COLUMNS]))
    out += [line(_cells(r)) for r in rows]
    out.append(line(["-" * w for _, w in COLUMNS]))
    out.append(line(_cells(total)))
    return "\n".join(out)


def totals(rows: list[Row]) -> Row:
    total = Row("total")
    for r in rows:
        total.injected += r.injected
        total.survived += r.survived
        total.bytes_leaked += r.bytes_leaked
        total.shm_left += r.shm_left
        total.procs_left += r.procs_left
        total.seconds += r.seconds
        if r.refused is not None:
            total.refused = (total.refused or 0) + r.refused
    return total


def _as_json(rows: list[Row], total: Row, extra: dict[str, Any]) -> dict[str, Any]:
    def one(r: Row) -> dict[str, Any]:
        return {
            "fault": r.fault,
            "injected": r.injected,
            "survived": r.survived,
            "bytes_leaked": r.bytes_leaked,
            "shm_files_left": r.shm_left,
            "processes_left": r.procs_left,
            "connections_refused": r.refused,
            "seconds": round(r.seconds, 1),
            "failures": r.failures,
        }

    return {"rows": [one(r) for r in rows], "total": one(total), **extra}


def _interrupt_on_signals() -> None:
    # SIGTERM (a CI's timeout, say) ends the run through the same cleanup as Ctrl-C.
    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, handler)
    # A background job's SIGINT starts ignored; the suite's Ctrl-C must still clean up.
    signal.signal(signal.SIGINT, signal.default_int_handler)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ember.tools.chaos",
        description="Inject faults and hostile peers into a 2-node loopback cluster under "
        "load; print what survived and what leaked.",
    )
    parser.add_argument("--quick", action="store_true", help="each fault once (~3 minutes)")
    parser.add_argument("--rounds", type=int, default=None, help="rounds of each fault (3)")
    parser.add_argument("--json", dest="json_path", default=None, help="also write JSON here")
    parser.add_argument("--filter", default=None, help="only faults whose name contains this")
    args = parser.parse_args(argv)
    rounds = args.rounds if args.rounds is not None else (1 if args.quick else 3)
    if rounds < 1:
        parser.error("--rounds must be at least 1")
    chosen = [(n, f) for n, f in faults() if not args.filter or args.filter in n]
    if not chosen:
        parser.error(f"no fault's name contains {args.filter!r}")

    def log(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    _interrupt_on_signals()
    rows = [Row(name) for name, _ in chosen]
    h = Harness(log)
    interrupted, crashed = "", ""
    started = time.monotonic()
    try:
        log(f"chaos: starting a 2-node cluster under {h.work_dir}")
        h.start()
        for n in range(rounds):
            log(f"chaos: round {n + 1} of {rounds}")
            for row, (_, fault) in zip(rows, chosen, strict=True):
                run_round(h, row, fault, log)
    except KeyboardInterrupt as e:
        interrupted = str(e) or "Ctrl-C"
    except Exception:
        crashed = traceback.format_exc()
    finally:
        # A second Ctrl-C must not cut the cleanup short.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        procs, shm = h.close()
    total = totals(rows)
    # What the final stop had to remove by force leaked too.
    total.procs_left += len(procs)
    total.shm_left += len(shm)
    print(table(rows, total))
    print(f"cleanup: {len(procs)} processes and {len(shm)} /dev/shm files left after the stop")
    print(f"elapsed: {time.monotonic() - started:.0f} s")
    failed = [f"{r.fault}: {x}" for r in rows for x in r.failures]
    for f in failed:
        print("FAILED", f)
    if crashed:
        print("the suite itself failed:\n" + crashed)
    if interrupted:
        print(f"interrupted ({interrupted}): the table covers the rounds that ran")
    if args.json_path:
        extra = {"rounds": rounds, "forced_cleanup": {"processes": procs, "shm_files": shm}}
        extra["error"] = crashed or interrupted or None
        with open(args.json_path, "w") as f:
            json.dump(_as_json(rows, total, extra), f, indent=2)
    ok = (
        not failed
        and not crashed
        and not interrupted
        and total.survived == total.injected
        and total.bytes_leaked == 0
        and total.shm_left == 0
        and total.procs_left == 0
    )
    return 0 if ok else 1
