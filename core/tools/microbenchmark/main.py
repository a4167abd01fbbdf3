"""The command line: ``python -m ember.tools.microbenchmark`` and ``ember microbenchmark``."""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import multiprocessing
import os
import platform
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, replace
from types import ModuleType

from .runner import run
from .timing import QUICK_TIMING, RAY_TIMING, Result, Timing
from .workloads import select


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="ember microbenchmark",
        description="Run the workloads of `ray microbenchmark` (plus Ember's start-up time "
        "and idle memory rows) on Ember or, with --runtime ray, on Ray.",
    )
    p.add_argument(
        "--filter",
        default=os.environ.get("TESTS_TO_RUN") or None,
        help="run only rows whose name contains SUBSTRING (default: $TESTS_TO_RUN, as Ray)",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="short trials and no settle sleep: a smoke test, not a measurement",
    )
    p.add_argument("--json", metavar="FILE", help="write the results to FILE as JSON")
    p.add_argument(
        "--runtime",
        default="ember",
        help="module implementing Ray's API to measure (default: ember)",
    )
    p.add_argument(
        "--extra",
        action="store_true",
        help="also run the rows of `ray microbenchmark` outside the comparison set",
    )
    p.add_argument("--duration", type=float, help="seconds per trial (Ray: 2)")
    p.add_argument("--trials", type=int, help="trials per row (Ray: 4)")
    p.add_argument("--warmup", type=float, help="warm-up seconds per row (Ray: 1)")
    p.add_argument(
        "--settle", type=float, help="seconds to sleep before each row (Ray: 10; --quick: 0)"
    )
    p.add_argument(
        "--row-timeout",
        type=float,
        default=600.0,
        help="fail a row that gives no result in this many seconds (0: never)",
    )
    p.add_argument("--list", action="store_true", help="print the selected rows and exit")
    return p


def _write_json(
    path: str,
    rt: ModuleType,
    args: argparse.Namespace,
    timing: Timing,
    started: float,
    results: list[Result],
    complete: bool = False,
) -> None:
    doc = {
        "runtime": args.runtime,
        "version": getattr(rt, "__version__", None),
        "python": platform.python_version(),
        "cpu_count": multiprocessing.cpu_count(),
        "timing": asdict(timing),
        "filter": args.filter,
        "started": datetime.datetime.fromtimestamp(started).isoformat(timespec="seconds"),
        "elapsed_s": time.time() - started,
        "complete": complete,
        "results": [asdict(r) for r in results],
    }
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=2)
    os.replace(tmp, path)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    rows = select(args.filter, extra=args.extra)
    if args.list:
        for w in rows:
            print(w.name)
        return 0
    if not rows:
        print(f"no row matches --filter {args.filter!r}", file=sys.stderr)
        return 2
    try:
        rt = importlib.import_module(args.runtime)
    except ImportError as exc:
        print(f"cannot import runtime {args.runtime!r}: {exc}", file=sys.stderr)
        return 2
    if getattr(rt, "__file__", None) is None:
        print(
            f"{args.runtime!r} imported as a namespace package from {list(rt.__path__)}: is "
            f"there a directory named {args.runtime!r} in the current directory? Run from "
            "another one.",
            file=sys.stderr,
        )
        return 2
    if not callable(getattr(rt, "init", None)):
        print(
            f"{args.runtime} runtime not built yet: {args.runtime}.init does not exist "
            f"(module {rt.__file__})",
            file=sys.stderr,
        )
        return 2
    timing = QUICK_TIMING if args.quick else RAY_TIMING
    overrides = {
        k: getattr(args, k)
        for k in ("duration", "trials", "warmup", "settle")
        if getattr(args, k) is not None
    }
    timing = replace(timing, **overrides)
    started = time.time()
    done: list[Result] = []

    def on_result(r: Result) -> None:
        # Written after every row, so a run that dies part-way still leaves its rows.
        done.append(r)
        if args.json:
            _write_json(args.json, rt, args, timing, started, done)

    results = run(
        rt,
        filter=args.filter,
        timing=timing,
        extra=args.extra,
        row_timeout=args.row_timeout or None,
        on_result=on_result,
    )
    if args.json:
        _write_json(args.json, rt, args, timing, started, results, complete=True)
    return 0 if all(r.ok for r in results) else 1
