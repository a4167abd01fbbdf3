"""Running a selection of rows in one session of the runtime, each within its deadline."""

from __future__ import annotations

import contextlib
import gc
import multiprocessing
import os
import sys
import traceback
from collections.abc import Callable
from dataclasses import replace
from types import ModuleType

from .probes import measure_idle_memory, measure_startup
from .timing import (
    QUICK_TIMING,
    RAY_TIMING,
    STARTUP_ROW,
    Result,
    Timing,
    _deadline,
    error_text,
    timeit,
)
from .workloads import SESSION_INIT_KWARGS, Context, Workload, define, select


def _failed(name: str, unit: str, exc: BaseException) -> Result:
    error = error_text(exc)
    print(f"{name} FAILED: {error}", flush=True)
    traceback.print_exception(exc, file=sys.stderr)
    return Result(name, unit, error=error)


def _run_session(
    rt: ModuleType,
    session: str,
    rows: list[Workload],
    timing: Timing,
    row_timeout: float | None,
    record: Callable[[Result], None],
) -> None:
    try:
        # Interrupting a start-up can orphan its processes: give init at least 2 minutes.
        with _deadline(max(row_timeout, 120.0) if row_timeout else None):
            rt.init(**SESSION_INIT_KWARGS[session])
    except Exception as exc:  # noqa: BLE001 - every row of the session fails alike
        error = f"init failed: {error_text(exc)}"
        traceback.print_exception(exc, file=sys.stderr)
        for w in rows:
            print(f"{w.name} FAILED: {error}", flush=True)
            record(Result(w.name, "per second", error=error))
        with contextlib.suppress(Exception):
            rt.shutdown()
        return
    try:
        try:
            ctx = Context(rt, define(rt), max(1, multiprocessing.cpu_count() // 2))
        except Exception as exc:  # noqa: BLE001 - no row of the session can run
            for w in rows:
                record(_failed(w.name, "per second", exc))
            return
        for w in rows:
            assert w.setup is not None
            try:
                with _deadline(row_timeout):
                    fn, multiplier = w.setup(ctx)
                    result = timeit(w.name, fn, multiplier, timing)
            except Exception as exc:  # noqa: BLE001 - report and go on with the others
                result = _failed(w.name, "per second", exc)
            finally:
                # Drop the row's actors and objects before the next row, as Ray does by
                # rebinding its variables.
                fn = multiplier = None  # type: ignore[assignment]
                gc.collect()
            record(result)
    finally:
        try:
            rt.shutdown()
        except Exception:  # noqa: BLE001 - the rows are measured; say so and go on
            print("shutdown raised:", file=sys.stderr)
            traceback.print_exc()


def run(
    rt: ModuleType,
    *,
    filter: str | None = None,
    duration: float | None = None,
    quick: bool = False,
    timing: Timing | None = None,
    extra: bool = False,
    row_timeout: float | None = 600.0,
    on_result: Callable[[Result], None] | None = None,
) -> list[Result]:
    """Run the selected workloads on runtime module ``rt`` and return their results.

    ``quick`` uses short trials (smoke tests); ``duration`` overrides the trial length.
    A workload that raises, or gives no result within ``row_timeout`` seconds, is printed
    as ``<name> FAILED: <error>`` and the others go on. ``on_result`` is called with each
    row's result as soon as it is known.
    """
    timing = timing or (QUICK_TIMING if quick else RAY_TIMING)
    if duration is not None:
        timing = replace(timing, duration=duration)
    if rt.__name__ == "ray":
        # No usage reports leave the machine from a benchmark run.
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    rows = select(filter, extra=extra)
    results: dict[str, Result] = {}

    def record(r: Result) -> None:
        results[r.name] = r
        if on_result is not None:
            on_result(r)

    for session in ("default", "pg", "spill"):
        group = [w for w in rows if w.session == session]
        if group:
            _run_session(rt, session, group, timing, row_timeout, record)
    # Probes last: a fresh process each, while no node of this process is up.
    for w in rows:
        if w.session != "probe":
            continue
        try:
            if w.name == STARTUP_ROW:
                record(measure_startup(rt.__name__, runs=3, settle=timing.settle))
            else:
                record(measure_idle_memory(rt.__name__, settle=timing.settle))
        except Exception as exc:  # noqa: BLE001
            unit = "seconds" if w.name == STARTUP_ROW else "MB"
            record(_failed(w.name, unit, exc))
    return [results[w.name] for w in rows]
