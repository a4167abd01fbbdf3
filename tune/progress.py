"""The table printed when an experiment ends: one row per trial (status, its sampled values,
the metric), readable with many trials (long values are cut)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from ember.tune.files import flatten
from ember.tune.trial import Trial

MAX_ROWS = 40  # more trials are summarised by status, not listed


def _cell(value: Any) -> str:
    text = f"{value:.5g}" if isinstance(value, float) else str(value)
    return text if len(text) <= 20 else text[:19] + "…"


def format_table(trials: list[Trial], metric: str | None) -> str:
    keys: list[str] = []
    for trial in trials:
        for key in flatten(trial.config):
            if key not in keys:
                keys.append(key)
    header = ["Trial name", "status", *keys, "iter"] + ([metric] if metric else [])
    rows = []
    for trial in trials[:MAX_ROWS]:
        flat = flatten(trial.config)
        row = [trial.trial_name, trial.status, *(_cell(flat.get(k, "")) for k in keys)]
        row.append(str(trial.last_result.get("training_iteration", "")))
        if metric:
            row.append(_cell(trial.last_result.get(metric, "")))
        rows.append(row)
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows, strict=True)]
    lines = [
        "  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)) for r in [header, *rows]
    ]
    if len(trials) > MAX_ROWS:
        lines.append(f"... and {len(trials) - MAX_ROWS} more trials")
    counts = Counter(t.status for t in trials)
    lines.insert(0, ", ".join(f"{n} {s}" for s, n in sorted(counts.items())))
    return "\n".join(lines)


def print_summary(name: str, trials: list[Trial], metric: str | None) -> None:
    print(f"Experiment {name}: {len(trials)} trials\n{format_table(trials, metric)}", flush=True)
