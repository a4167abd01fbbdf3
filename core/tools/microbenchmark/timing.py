"""Results, the timing loop of Ray's ``ray_microbenchmark_helpers.timeit`` and a per-row deadline."""

from __future__ import annotations

import contextlib
import signal
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

STARTUP_ROW = "init -> first task -> shutdown"
MEMORY_ROW = "idle local node resident memory"

# Environment variable that marks every process started on behalf of one memory probe.
PROBE_MARK_ENV = "EMBER_MICROBENCHMARK_PROBE"
_PROBE_PREFIX = "@@probe-result@@ "
# Loads this package from its folder (no directory of it lands on sys.path, so it runs where
# Ember is not installed) and runs a probe.
_PROBE_LAUNCHER = (
    "import importlib, importlib.util, os, sys\n"
    "d = sys.argv[1]\n"
    "spec = importlib.util.spec_from_file_location(\n"
    "    '_microbenchmark_probe', os.path.join(d, '__init__.py'), submodule_search_locations=[d]\n"
    ")\n"
    "mod = importlib.util.module_from_spec(spec)\n"
    "sys.modules[spec.name] = mod\n"
    "spec.loader.exec_module(mod)\n"
    "sys.exit(importlib.import_module(spec.name + '.probes').probe_main(sys.argv[2:]))\n"
)
MIB = 1024 * 1024


@dataclass
class Result:
    """One row. ``value`` is the mean rate for ``per second`` rows, the best time for the
    ``seconds`` row and the total resident memory for the ``MB`` row."""

    name: str
    unit: str
    value: float | None = None
    std: float | None = None
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class Timing:
    """Ray's timeit: sleep (``settle``), warm up for ``warmup`` seconds, then ``trials``
    trials of ``duration`` seconds each, calling in steps of a tenth of the warm-up count."""

    settle: float = 10.0
    warmup: float = 1.0
    trials: int = 4
    duration: float = 2.0


RAY_TIMING = Timing()
QUICK_TIMING = Timing(settle=0.0, warmup=0.2, trials=2, duration=0.5)


def timeit(
    name: str, fn: Callable[[], object], multiplier: float = 1, timing: Timing = RAY_TIMING
) -> Result:
    """Measure ``fn`` the way Ray's ``timeit`` does and print Ray's line for it."""
    # Ray sleeps before every row "to avoid noisy neighbours"; it also lets actors that
    # the row just created finish starting.
    time.sleep(timing.settle)
    start = time.perf_counter()
    count = 0
    while True:
        fn()
        count += 1
        if time.perf_counter() - start >= timing.warmup:
            break
    step = count // 10 + 1
    stats: list[float] = []
    for _ in range(timing.trials):
        start = time.perf_counter()
        count = 0
        while time.perf_counter() - start < timing.duration:
            for _ in range(step):
                fn()
            count += step
        end = time.perf_counter()
        stats.append(multiplier * count / (end - start))
    mean = statistics.fmean(stats)
    sd = statistics.pstdev(stats)  # np.std: the population deviation
    print(name, "per second", round(mean, 2), "+-", round(sd, 2), flush=True)
    return Result(
        name,
        "per second",
        mean,
        sd,
        extra={"trials": stats, "step": step, "multiplier": multiplier},
    )


class RowTimeout(Exception):
    """A workload produced no result within its deadline."""


@contextlib.contextmanager
def _deadline(seconds: float | None) -> Iterator[None]:
    """Raise RowTimeout in the main thread after ``seconds`` (no-op elsewhere)."""
    if (
        not seconds
        or threading.current_thread() is not threading.main_thread()
        or not hasattr(signal, "setitimer")
    ):
        yield
        return

    def on_alarm(signum: int, frame: object) -> None:
        raise RowTimeout(f"no result within {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def error_text(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__
