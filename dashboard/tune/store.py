"""The Tune view's state: the experiments that drivers publish in the GCS KV (namespace
``tune``; the record format is documented in ``ember/tune/publish.py``, the contract between
the two, since the dashboard never imports ``ember.tune``).

Live, ``poll_loop`` reads each experiment's record every ``POLL_S`` and fetches again only
the chunks of trials whose version changed, keeping one flat row per trial (what the trials
table filters, sorts and shows). Curves stay in the KV and are read when asked for. What was
read is also handed to the session's history (``record("tune", ...)``): rows at most every
``HISTORY_ROWS_S``, curves every ``HISTORY_CURVES_S`` and at the experiment's end, so
``ember dashboard --history`` shows the experiments after the cluster is gone
(``history_reader`` replays the records into ``apply``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from ember.dashboard.query import sort_key

logger = logging.getLogger("ember.dashboard")

NAMESPACE = "tune"
POLL_S = 1.0
HISTORY_ROWS_S = 2.0
HISTORY_CURVES_S = 10.0
MAX_EXPERIMENTS = 1_000  # experiments kept (the oldest finished go first)
# The row fields that are not hyperparameters or metrics, in the table's default order.
BASE_COLUMNS = (
    "trial_id",
    "status",
    "iterations",
    "time_total_s",
    "node_id",
    "actor_id",
    "pid",
    "num_failures",
    "start_time",
    "trial_name",
    "actor_name",
    "stop_reason",
    "logdir",
    "error",
)


def _flatten(config: Any, prefix: str) -> dict[str, Any]:
    if not isinstance(config, dict):
        return {prefix.rstrip("/"): config}
    out: dict[str, Any] = {}
    for key, value in config.items():
        out.update(_flatten(value, f"{prefix}{key}/"))
    return out


def flat_row(row: dict[str, Any], metric: str | None, mode: str | None) -> dict[str, Any]:
    """A published trial row as the table's columns: ``config/<key>`` per hyperparameter,
    ``last/<m>`` per metric, ``best/<metric>`` for the experiment's metric (by its mode), and
    ``min/<m>`` and ``max/<m>`` for the others (which way is better is not known for them)."""
    out = {k: row.get(k) for k in BASE_COLUMNS if k in row}
    out.update(_flatten(row.get("config") or {}, "config/"))
    for name, seen in (row.get("metrics") or {}).items():
        out[f"last/{name}"] = seen.get("last")
        if name == metric and mode in ("min", "max"):
            out[f"best/{name}"] = seen.get(mode)
        else:
            out[f"min/{name}"], out[f"max/{name}"] = seen.get("min"), seen.get("max")
    return out


@dataclass
class Experiment:
    record: dict[str, Any]
    chunks: list[list[dict[str, Any]]] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    where: dict[str, int] = field(default_factory=dict)  # trial id -> chunk
    curves: dict[str, dict[str, Any]] = field(default_factory=dict)  # history only: by trial
    columns: list[str] = field(default_factory=list)
    best_trial_id: str | None = None
    best_value: float | None = None
    sorted_cache: dict[tuple[str, bool], list[dict[str, Any]]] = field(default_factory=dict)
    # What the history has not been given yet, and when it last was.
    unrecorded_rows: dict[int, list] = field(default_factory=dict)  # the newest raw rows
    unrecorded_curves: set[str] = field(default_factory=set)  # trials that reported since
    rows_recorded: float = 0.0
    curves_recorded: float = 0.0

    @property
    def name(self) -> str:
        return self.record["name"]

    def rows(self) -> list[dict[str, Any]]:
        return [r for chunk in self.chunks for r in chunk]

    def sorted_rows(self, column: str, descending: bool) -> list[dict[str, Any]]:
        """The rows in a column's order, kept until the rows change: the page sorts the same
        10,000 rows on every poll (48 ms each time otherwise)."""
        key = (column, descending)
        if key not in self.sorted_cache:
            order = sort_key(column)
            self.sorted_cache[key] = sorted(self.rows(), key=order, reverse=descending)
        return self.sorted_cache[key]

    def set_chunk(self, index: int, rows: list[dict[str, Any]], version: int) -> None:
        while len(self.chunks) <= index:
            self.chunks.append([])
            self.versions.append(-1)
        metric, mode = self.record.get("metric"), self.record.get("mode")
        before = {r["trial_id"]: r.get("iterations") for r in self.chunks[index]}
        self.chunks[index] = [flat_row(r, metric, mode) for r in rows]
        self.versions[index] = version
        for r in rows:
            self.where[r["trial_id"]] = index
            if before.get(r["trial_id"], -1) != r.get("iterations"):
                self.unrecorded_curves.add(r["trial_id"])  # it reported: its curve grew

    def refresh(self) -> None:
        """Columns and the best trial, once per change (not per request)."""
        self.sorted_cache.clear()
        seen: dict[str, None] = dict.fromkeys(c for c in BASE_COLUMNS if c != "error")
        for row in self.rows():
            seen.update(dict.fromkeys(row))
        seen["error"] = None
        self.columns = list(seen)
        metric, mode = self.record.get("metric"), self.record.get("mode")
        self.best_trial_id = self.best_value = None
        if not metric or mode not in ("min", "max"):
            return
        # The best trial by its last result (Ray's default scope for get_best_result).
        key = f"last/{metric}"
        for row in self.rows():
            value = row.get(key)
            if value is None:
                continue
            if self.best_value is None or (
                value > self.best_value if mode == "max" else value < self.best_value
            ):
                self.best_trial_id, self.best_value = row["trial_id"], value

    def summary(self) -> dict[str, Any]:
        rec = self.record
        return {
            **{k: rec.get(k) for k in ("name", "path", "status", "stop_reason", "metric")},
            **{k: rec.get(k) for k in ("mode", "start_time", "end_time", "updated", "job_id")},
            "num_trials": rec.get("num_trials", 0),
            "status_counts": rec.get("status_counts") or {},
            "space": rec.get("space") or {},
            "best_trial_id": self.best_trial_id,
            "best_value": self.best_value,
        }


class TuneStore:
    def __init__(self) -> None:
        self.experiments: dict[str, Experiment] = {}

    def get(self, name: str) -> Experiment | None:
        return self.experiments.get(name)

    def _experiment(self, record: dict[str, Any]) -> Experiment:
        exp = self.experiments.get(record["name"])
        if exp is None:
            if len(self.experiments) >= MAX_EXPERIMENTS:
                oldest = min(
                    self.experiments.values(),
                    key=lambda e: (e.record.get("status") == "RUNNING", e.record.get("updated", 0)),
                )
                del self.experiments[oldest.name]
            exp = self.experiments[record["name"]] = Experiment(record)
        exp.record = record
        return exp

    def apply(self, rec: dict[str, Any]) -> None:
        """A ``tune`` history record: the experiment, the chunks that changed (by index, as
        text keys in JSON) and, sometimes, curves."""
        exp = self._experiment(rec["exp"])
        versions = exp.record.get("chunks") or []
        for index, rows in (rec.get("chunks") or {}).items():
            i = int(index)
            exp.set_chunk(i, rows, versions[i] if i < len(versions) else 0)
        exp.curves.update(rec.get("curves") or {})
        exp.unrecorded_curves.clear()  # replayed, not live: nothing to hand on
        exp.refresh()

    # --- live -----------------------------------------------------------------------------
    async def poll(self, gcs: Any, record: Any, now: float) -> None:
        for key in await gcs.kv("kv_keys", NAMESPACE, b"exp/"):
            raw = await gcs.kv("kv_get", NAMESPACE, key)
            if not raw:
                continue
            try:
                record_ = json.loads(raw)
            except ValueError:
                logger.warning("tune: unreadable experiment record %r", key)
                continue
            before = self.experiments.get(record_.get("name", ""))
            old_status = before.record.get("status") if before else None
            exp = self._experiment(record_)
            changed = False
            for i, version in enumerate(record_.get("chunks") or []):
                if i < len(exp.versions) and exp.versions[i] == version:
                    continue
                raw_rows = await gcs.kv("kv_get", NAMESPACE, f"trials/{exp.name}/{i}".encode())
                rows = json.loads(raw_rows) if raw_rows else []
                exp.set_chunk(i, rows, version)
                changed = True
                exp.unrecorded_rows[i] = rows
            if changed or old_status != record_.get("status"):
                exp.refresh()
            await self._record_history(gcs, record, exp, old_status, now)

    async def _record_history(
        self, gcs: Any, record: Any, exp: Experiment, old_status: str | None, now: float
    ) -> None:
        ended = exp.record.get("status") != "RUNNING"
        status_changed = old_status != exp.record.get("status")
        if not (status_changed or exp.unrecorded_rows):
            return
        if not (status_changed or ended or now - exp.rows_recorded >= HISTORY_ROWS_S):
            return
        body: dict[str, Any] = {
            "exp": exp.record,
            "chunks": {str(i): rows for i, rows in sorted(exp.unrecorded_rows.items())},
        }
        exp.unrecorded_rows.clear()
        exp.rows_recorded = now
        if exp.unrecorded_curves and (ended or now - exp.curves_recorded >= HISTORY_CURVES_S):
            curves = {}
            for trial_id in sorted(exp.unrecorded_curves):
                curve = await _curve(gcs, exp.name, trial_id)
                if curve is not None:
                    curves[trial_id] = curve
            body["curves"] = curves
            exp.unrecorded_curves.clear()
            exp.curves_recorded = now
        record("tune", body)

    async def curves(self, gcs: Any, exp: Experiment, trial_ids: list[str]) -> dict[str, Any]:
        """``{trial_id: {"iter", "time", "metrics"}}`` for the trials asked (from the KV
        live, from the history's last copy otherwise)."""
        if gcs is not None:
            found = await asyncio.gather(*(_curve(gcs, exp.name, t) for t in trial_ids))
        else:
            found = [exp.curves.get(t) for t in trial_ids]
        return {t: c for t, c in zip(trial_ids, found, strict=True) if c is not None}

    async def request_stop(self, gcs: Any, name: str, trial_id: str | None, reason: str) -> None:
        """Writes the stop request the experiment's driver reads (``stop/<name>``)."""
        key = f"stop/{name}".encode()
        raw = await gcs.kv("kv_get", NAMESPACE, key)
        asked = json.loads(raw) if raw else {"experiment": None, "trials": {}}
        request = {"reason": reason, "time": time.time()}
        if trial_id is None:
            asked["experiment"] = request
        else:
            asked.setdefault("trials", {})[trial_id] = request
        await gcs.kv("kv_put", NAMESPACE, key, json.dumps(asked).encode())


async def _curve(gcs: Any, name: str, trial_id: str) -> dict[str, Any] | None:
    raw = await gcs.kv("kv_get", NAMESPACE, f"curves/{name}/{trial_id}".encode())
    return json.loads(raw) if raw else None


def store_of(state: Any) -> TuneStore:
    """The state's Tune store (made on first use; the live and the history dashboards each
    have their own state)."""
    store = getattr(state, "tune_store", None)
    if store is None:
        store = TuneStore()
        state.tune_store = store
    return store


async def poll_loop(ctx: Any) -> None:
    """Reads the experiments while the dashboard runs; a failed poll is retried next time
    (the GCS client's own loop decides when the head is gone)."""
    store = store_of(ctx.state)
    while True:
        try:
            await store.poll(ctx.gcs, ctx.state.record, time.time())
        except Exception as e:  # noqa: BLE001 - retried on the next turn
            logger.debug("tune poll failed: %s", e)
        await asyncio.sleep(POLL_S)
