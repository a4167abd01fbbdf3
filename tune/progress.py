"""The progress table in the terminal (and, as plain text redrawn in place, in Jupyter), driven
by ``RunConfig(verbose=...)`` as in Ray: 0 prints nothing, 1 (the default) a status block every
``max_report_frequency`` seconds and the full table at the end, 2 also a line per result.

A status block reads as Ray's: ``Trial status: 3 RUNNING | 97 TERMINATED``, the time, the
current best trial, then one row per trial (its sampled values, iterations, time and metrics).
With more trials than ``max_progress_rows`` each status shows its first rows and says how many
more it has, so 100 trials stay one screen; ``sort_by_metric`` puts the best first."""

from __future__ import annotations

import datetime
import math
import sys
import time
from typing import Any

from ember.tune.callback import Callback
from ember.tune.files import flatten
from ember.tune.trial import ERROR, PAUSED, PENDING, RUNNING, TERMINATED, Trial

ORDER = (RUNNING, TERMINATED, PAUSED, PENDING, ERROR)  # Ray's order of statuses in the table
MAX_CELL = 20
# Result fields that are bookkeeping, not metrics (Ray's list, less the ones shown as columns).
NOT_METRICS = {
    "config", "date", "done", "hostname", "iterations_since_restore", "node_ip", "pid",
    "time_since_restore", "timestamp", "trial_id", "experiment_tag", "should_checkpoint",
    "training_iteration", "time_total_s", "time_this_iter_s", "checkpoint_dir_name",
}  # fmt: skip


def _cell(value: Any) -> str:
    if value is None:
        return ""
    text = f"{value:.5g}" if isinstance(value, float) else str(value)
    return text if len(text) <= MAX_CELL else "..." + text[3 - MAX_CELL :]


def in_jupyter() -> bool:
    shell = sys.modules.get("IPython")
    ip = getattr(shell, "get_ipython", lambda: None)() if shell else None
    return type(ip).__name__ == "ZMQInteractiveShell"


def _render(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(c) for c in col) for col in zip(header, *rows, strict=True)]
    line = "  ".join("-" * w for w in widths)
    out = ["  ".join(c.ljust(w) for c, w in zip(header, widths, strict=True)).rstrip(), line]
    out += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return out


class ProgressReporter(Callback):
    """Ray 0.8's reporter interface: ``should_report(trials, done)`` is asked after each result,
    each trial's end, on every turn of the experiment's loop (so a status block comes on a
    timer, not only when results arrive) and at the end (``done=True``); when it says yes,
    ``report(trials, done, *sys_info)`` runs. ``sys_info``: the scheduler in use and the
    experiment's directory, as lines of text."""

    verbose = 1
    sys_info: tuple[str, ...] = ()

    def should_report(self, trials: list, done: bool = False) -> bool:
        return True

    def report(self, trials: list, done: bool, *sys_info: str) -> None:
        raise NotImplementedError(f"{type(self).__name__} must define report()")

    def set_search_properties(self, metric: str | None, mode: str | None) -> None:
        pass

    def _maybe_report(self, trials: list, done: bool = False) -> None:
        if self.verbose >= 1 and self.should_report(trials, done=done):
            self.report(trials, done, *self.sys_info)

    def on_trial_result(
        self, iteration: int, trials: list, trial: Any, result: dict, **info: Any
    ) -> None:
        self._maybe_report(trials)

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._maybe_report(trials)

    def on_step_end(self, iteration: int, trials: list, **info: Any) -> None:
        self._maybe_report(trials)

    def on_experiment_end(self, trials: list, **info: Any) -> None:
        self._maybe_report(trials, done=True)


class CLIReporter(ProgressReporter):
    """Ray's reporter arguments: which columns, how many rows, how often, best first."""

    def __init__(
        self,
        metric_columns: list[str] | dict[str, str] | None = None,
        parameter_columns: list[str] | dict[str, str] | None = None,
        max_progress_rows: int = 20,
        max_error_rows: int = 20,
        max_report_frequency: float = 5,
        sort_by_metric: bool = False,
        metric: str | None = None,
        mode: str | None = None,
    ) -> None:
        if not isinstance(max_progress_rows, int) or max_progress_rows < 1:
            raise ValueError(
                f"max_progress_rows must be a positive integer, got {max_progress_rows!r}"
            )
        if mode is not None and mode not in ("min", "max"):
            raise ValueError(f"mode must be 'min' or 'max', got {mode!r}")
        self.metric_columns = metric_columns
        self.parameter_columns = parameter_columns
        self.max_progress_rows = max_progress_rows
        self.max_error_rows = max_error_rows
        self.max_report_frequency = max_report_frequency
        self.sort_by_metric = sort_by_metric
        self.metric, self.mode = metric, mode
        self.verbose = 1
        self.start = time.time()
        self._last = 0.0

    def set_search_properties(self, metric: str | None, mode: str | None) -> None:
        self.metric = self.metric or metric
        self.mode = self.mode or mode

    def add_metric_column(self, metric: str, representation: str | None = None) -> None:
        """Shows ``metric`` (a key of the results) as a column, under ``representation``."""
        columns = self.metric_columns
        if columns is None:
            columns = {"training_iteration": "iter", "time_total_s": "total time (s)"}
        elif not isinstance(columns, dict):
            columns = {c: c for c in columns}
        if metric in columns:
            raise ValueError(f"metric column {metric!r} is already shown")
        self.metric_columns = {**columns, metric: representation or metric}

    # --- what is shown --------------------------------------------------------------------
    def _params(self, trials: list[Trial]) -> dict[str, str]:
        if self.parameter_columns:
            cols = self.parameter_columns
            return dict(cols) if isinstance(cols, dict) else {c: c for c in cols}
        keys: dict[str, str] = {}
        for trial in trials:
            # The sampled values (what differs between trials), not the constants.
            for key in trial.evaluated_params or flatten(trial.config):
                keys.setdefault(key, key)
        return keys

    def _metrics(self, trials: list[Trial]) -> dict[str, str]:
        cols = {"training_iteration": "iter", "time_total_s": "total time (s)"}
        if self.metric_columns:
            given = self.metric_columns
            return cols | (dict(given) if isinstance(given, dict) else {c: c for c in given})
        if self.metric:
            cols[self.metric] = self.metric
        for trial in trials:
            result = {k: v for k, v in trial.last_result.items() if k != "config"}
            for key, value in flatten(result).items():
                if len(cols) >= 6:  # two fixed columns and the first four metrics, as Ray
                    return cols
                if key not in NOT_METRICS and isinstance(value, int | float):
                    cols.setdefault(key, key)
        return cols

    def _best(self, trials: list[Trial]) -> Trial | None:
        if not self.metric or not self.mode:
            return None
        sign = 1.0 if self.mode == "max" else -1.0
        scored = [
            (sign * v, t)
            for t in trials
            if isinstance(v := t.last_result.get(self.metric), int | float) and not math.isnan(v)
        ]
        return max(scored, key=lambda s: s[0])[1] if scored else None

    def _ordered(self, trials: list[Trial]) -> list[Trial]:
        if not (self.sort_by_metric and self.metric and self.mode):
            return trials
        sign = -1.0 if self.mode == "max" else 1.0

        def key(t: Trial) -> tuple:
            v = t.last_result.get(self.metric)
            ok = isinstance(v, int | float) and not math.isnan(v)
            return (not ok, sign * v if ok else 0.0)

        return sorted(trials, key=key)

    def status_line(self, trials: list[Trial]) -> str:
        counts: dict[str, int] = {}
        for trial in trials:
            counts[trial.status] = counts.get(trial.status, 0) + 1
        return "Trial status: " + " | ".join(f"{n} {s}" for s, n in counts.items())

    def table(self, trials: list[Trial], all_rows: bool = False) -> str:
        now = time.time()
        running = datetime.timedelta(seconds=int(now - self.start))
        lines = [
            self.status_line(trials),
            f"Current time: {datetime.datetime.fromtimestamp(now):%Y-%m-%d %H:%M:%S}. "
            f"Total running time: {running}",
        ]
        best = self._best(trials)
        if best is not None:
            lines.append(
                f"Current best trial: {best.trial_id} with {self.metric}="
                f"{best.last_result[self.metric]} and params={best.evaluated_params or best.config}"
            )
        params, metrics = self._params(trials), self._metrics(trials)
        header = ["Trial name", "status", *params.values(), *metrics.values()]
        per_status = len(trials) if all_rows or len(trials) <= self.max_progress_rows else 5
        rows, more = [], []
        for status in ORDER:
            these = self._ordered([t for t in trials if t.status == status])
            for trial in these[:per_status]:
                flat_config, flat_result = flatten(trial.config), flatten(trial.last_result)
                rows.append(
                    [trial.trial_name, trial.status]
                    + [_cell(flat_config.get(k)) for k in params]
                    + [_cell(flat_result.get(k)) for k in metrics]
                )
            if len(these) > per_status:
                more.append(f"{len(these) - per_status} more {status}")
        lines += _render(header, rows)
        if more:
            lines.append(", ".join(more))
        failed = [t for t in trials if t.num_failures]
        if all_rows and failed:
            lines.append(f"Number of errored trials: {len(failed)}")
            shown = [
                [t.trial_name, f"{t.num_failures}{'' if t.status == ERROR else '*'}",
                 f"{t.local_path}/error.txt"]
                for t in failed[: self.max_error_rows]
            ]  # fmt: skip
            lines += _render(["Trial name", "# failures", "error file"], shown)
            if any(t.status == TERMINATED for t in failed):
                lines.append("* The trial terminated successfully after retrying.")
        return "\n".join(lines)

    # --- when -----------------------------------------------------------------------------
    def _show(self, text: str) -> None:
        print(text, flush=True)

    def should_report(self, trials: list, done: bool = False) -> bool:
        if done:
            return bool(trials)
        now = time.time()
        if now - self._last >= self.max_report_frequency:
            self._last = now
            return True
        return False

    def report(self, trials: list, done: bool, *sys_info: str) -> None:
        self._show(self.table(trials, all_rows=done))

    def on_trial_result(
        self, iteration: int, trials: list, trial: Any, result: dict, **info: Any
    ) -> None:
        if self.verbose >= 2:
            shown = {k: v for k, v in result.items() if k not in NOT_METRICS}
            print(
                f"Trial {trial.trial_name} finished iteration "
                f"{result.get('training_iteration')}: {shown}",
                flush=True,
            )
        self._maybe_report(trials)

    def heartbeat(self, trials: list) -> None:
        self._maybe_report(trials)


class JupyterNotebookReporter(CLIReporter):
    """In a notebook, the block is redrawn in place (``overwrite``) as plain text."""

    def __init__(self, overwrite: bool = True, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.overwrite = overwrite

    def _show(self, text: str) -> None:
        if self.overwrite:
            try:
                from IPython.display import clear_output

                clear_output(wait=True)
            except ImportError:
                pass
        print(text, flush=True)


def make_reporter(reporter: ProgressReporter | None, verbose: int | None) -> ProgressReporter:
    """The reporter the experiment prints with: the user's, or Ray's default for where it
    runs (a notebook or a terminal)."""
    if reporter is None:
        reporter = JupyterNotebookReporter() if in_jupyter() else CLIReporter()
    if not isinstance(reporter, ProgressReporter):
        raise TypeError(
            f"progress_reporter must be a tune.CLIReporter, JupyterNotebookReporter or "
            f"tune.ProgressReporter, got {type(reporter).__name__}"
        )
    reporter.verbose = 1 if verbose is None else verbose
    return reporter


def print_summary(name: str, trials: list[Trial], metric: str | None) -> None:
    """The final table alone (used where no reporter ran)."""
    reporter = CLIReporter(metric=metric)
    print(f"Experiment {name}: {len(trials)} trials\n{reporter.table(trials, True)}", flush=True)
