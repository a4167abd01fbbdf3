"""The experiment's live state in the GCS key-value store, for the dashboard's Tune view.

The controller installs ``Publisher`` (a ``tune.Callback``) whenever the driver is connected
to a cluster (``install``). The dashboard never imports ``ember.tune``: the records below are
the contract between the two, and ``dashboard/tune/store.py`` reads exactly these.

Namespace ``tune``; every value is UTF-8 JSON:

- ``exp/<name>``: the experiment: ``{"format": 1, "name", "path", "status"`` (RUNNING,
  FINISHED, STOPPED: the user stopped it), ``"stop_reason"``, ``"metric"``, ``"mode"``,
  ``"start_time"``, ``"end_time"`` (epoch seconds), ``"updated"``, ``"job_id"`` (hex),
  ``"space"`` ({flattened key: the domain as text}), ``"num_trials"``, ``"status_counts"``,
  ``"chunk_size"``, ``"chunks"`` (one version number per chunk of trials: a reader fetches a
  chunk again only when its number changed)``}``.
- ``trials/<name>/<i>``: chunk ``i`` of the trials (``chunk_size`` of them, in the order they
  were made), a list of rows ``{"trial_id", "trial_name", "status", "config", "metrics":
  {metric: {"last", "min", "max"}}, "iterations", "time_total_s", "start_time", "actor_name",
  "actor_id", "num_failures", "error"`` (the traceback's text)``, "stop_reason", "logdir"}``.
- ``curves/<name>/<trial_id>``: that trial's curves, ``{"iter": [...], "time": [...],
  "metrics": {metric: [...]}}``: at most ``CURVE_POINTS`` points (evenly thinned as the run
  grows, the newest point always kept) of at most ``MAX_METRICS`` metrics. One key per trial,
  so a flush rewrites only the curves of the trials that reported.
- ``stop/<name>``: written by the dashboard, read here: ``{"experiment": {"reason"} | null,
  "trials": {trial_id: {"reason"}}}``. The controller stops what is asked on its next turn,
  and the rows say so in ``stop_reason``.

Bounds: the GCS takes values up to its frame size (2 GiB, ``protocol.codec.MAX_FRAME``), keeps
them in memory and writes each put through to its storage, so values stay small: trials in
chunks of 200 rows (~100 KB), a curve per trial (a few KB), and a flush writes only the chunks
and curves that changed, at most every ``FLUSH_S``. 10,000 trials reporting 100 results each
cost the GCS a few small puts a second, not one per result.
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import cloudpickle
import ember
from ember import global_state
from ember.tune.callback import Callback
from ember.tune.files import flatten
from ember.tune.kv_outbox import KvOutbox
from ember.tune.stopper import Stopper
from ember.tune.trial import ERROR, RUNNING, Trial

NAMESPACE = "tune"
FORMAT = 1
CHUNK = 200  # trials per KV value
CURVE_POINTS = 200  # points per trial and metric at most
MAX_METRICS = 20  # metrics per trial with a curve at most
FLUSH_S = 0.5  # the KV is written at most this often
POLL_S = 1.0  # stop requests are read this often
# Filled in by Tune on every result: shown as their own columns (iterations, time) or not
# at all, never as "metrics".
AUTO_FIELDS = frozenset(
    {
        "training_iteration",
        "time_total_s",
        "time_this_iter_s",
        "time_since_restore",
        "iterations_since_restore",
        "timestamp",
        "pid",
        "done",
        "date",
        "hostname",
        "node_ip",
        "timesteps_total",
        "episodes_total",
        "should_checkpoint",
        "checkpoint_dir_name",
        "__done__",
    }
)


def exp_key(name: str) -> bytes:
    return f"exp/{name}".encode()


def trials_key(name: str, chunk: int) -> bytes:
    return f"trials/{name}/{chunk}".encode()


def curves_key(name: str, trial_id: str) -> bytes:
    return f"curves/{name}/{trial_id}".encode()


def stop_key(name: str) -> bytes:
    return f"stop/{name}".encode()


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return value if math.isfinite(value) else None


class Curve:
    """One trial's curves, thinned to ``CURVE_POINTS``: every ``stride``-th result is kept,
    and when the list is full every other point goes and the stride doubles, so the points
    stay evenly spread over the whole run; the newest result is kept beside them."""

    def __init__(self) -> None:
        self.stride = 1
        self.seen = 0
        self.points: list[tuple[float, float, dict[str, float]]] = []
        self.latest: tuple[float, float, dict[str, float]] | None = None
        self.metrics: list[str] = []

    def add(self, result: dict) -> None:
        values = {}
        for key, raw in result.items():
            value = _number(raw)
            if value is None or key in AUTO_FIELDS:
                continue
            if key not in self.metrics:
                if len(self.metrics) >= MAX_METRICS:
                    continue
                self.metrics.append(key)
            values[key] = value
        point = (result.get("training_iteration", self.seen + 1), result.get("time_total_s", 0.0))
        self.latest = (*point, values)
        if self.seen % self.stride == 0:
            self.points.append(self.latest)
            if len(self.points) > CURVE_POINTS:
                self.points = self.points[::2]
                self.stride *= 2
        self.seen += 1

    def to_json(self) -> dict[str, Any]:
        points = list(self.points)
        if self.latest is not None and (not points or points[-1] is not self.latest):
            points.append(self.latest)
        return {
            "iter": [p[0] for p in points],
            "time": [round(p[1], 3) for p in points],
            "metrics": {m: [p[2].get(m) for p in points] for m in self.metrics},
        }


def space_summary(param_space: dict) -> dict[str, str]:
    """{flattened key: the domain as text}; a grid reads ``grid_search([...])``."""
    out = {}
    for key, value in flatten(param_space).items():
        if key == "grid_search" or key.endswith("/grid_search"):
            out[key.removesuffix("grid_search").rstrip("/")] = f"grid_search({value!r})"
        else:
            out[key] = repr(value)
    return out


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=repr))


class UserStopper(Stopper):
    """Wraps the experiment's stopper: ``stop_all`` runs on every turn of the controller's
    loop, on its thread, so the publisher flushes and applies the user's stop requests there
    (never from another thread, which would race the loop)."""

    def __init__(self, inner: Stopper, publisher: Publisher) -> None:
        self.inner = inner
        self.publisher = publisher

    def __call__(self, trial_id: str, result: dict) -> bool:
        return self.inner(trial_id, result)

    def stop_all(self) -> bool:
        stop = self.publisher.tick()
        return self.inner.stop_all() or stop


class Publisher(Callback):
    def __init__(self, controller: Any, call: Any) -> None:
        self.controller = controller
        self.loop = controller.loop
        self.name: str = controller.name
        self.outbox = KvOutbox(call, NAMESPACE, stop_key(self.name), POLL_S)
        self.index: dict[str, int] = {}  # trial id -> its place (chunk = place // CHUNK)
        self.curves: dict[str, Curve] = {}
        self.dirty_curves: set[str] = set()
        self.actors: dict[str, tuple[str, str]] = {}  # trial id -> (actor name, actor id)
        self.stop_reasons: dict[str, str] = {}
        self.signatures: dict[str, tuple] = {}
        self.dirty: set[int] = set()
        self.versions: list[int] = []
        self.status = RUNNING
        self.stop_reason = ""
        self.start_time = time.time()
        self.end_time: float | None = None
        self.last_flush = 0.0
        self.last_poll = 0.0
        self.header = self._header()

    # --- what the experiment is -----------------------------------------------------------
    def _header(self) -> dict[str, Any]:
        metric = mode = None
        space: dict[str, str] = {}
        try:
            saved = cloudpickle.loads((Path(self.controller.dir) / "tuner.pkl").read_bytes())
            metric = getattr(saved["tune_config"], "metric", None)
            mode = getattr(saved["tune_config"], "mode", None)
            space = space_summary(saved["param_space"] or {})
        except Exception:  # noqa: BLE001 - the view works without them (shows no best)
            pass
        scheduler = getattr(self.loop, "scheduler", None)
        metric = metric or getattr(scheduler, "metric", None) or getattr(scheduler, "_metric", None)
        mode = mode or getattr(scheduler, "mode", None) or getattr(scheduler, "_mode", None)
        try:
            job_id = ember.get_runtime_context().get_job_id()
        except Exception:  # noqa: BLE001 - shown empty
            job_id = ""
        return {
            "format": FORMAT,
            "name": self.name,
            "path": str(self.controller.dir),
            "metric": metric,
            "mode": mode,
            "job_id": job_id,
            "space": space,
            "chunk_size": CHUNK,
        }

    # --- tune.Callback --------------------------------------------------------------------
    def setup(self, **info: Any) -> None:
        self.outbox.start()
        self.tick(force=True)

    def on_trial_start(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        actor = self.controller.actors.get(trial.trial_id, (None, None))[0]
        if actor is not None:
            suffix = f"/run{trial.runs}" if trial.runs > 1 else ""
            name = f"tune/{self.name}/{trial.trial_name}{suffix}"
            self.actors[trial.trial_id] = (name, actor._actor_id.hex())
        self._touch(trial)

    def on_trial_result(
        self, iteration: int, trials: list, trial: Any, result: dict, **info: Any
    ) -> None:
        curve = self.curves.get(trial.trial_id)
        if curve is None:
            curve = self.curves[trial.trial_id] = Curve()
        curve.add(result)
        self.dirty_curves.add(trial.trial_id)
        self._touch(trial)
        self.tick()

    def on_experiment_end(self, trials: list, **info: Any) -> None:
        self.end_time = time.time()
        self.status = "STOPPED" if self.stop_reason else "FINISHED"
        self.tick(force=True)
        self.outbox.close()

    # --- the loop's turn ------------------------------------------------------------------
    def tick(self, force: bool = False) -> bool:
        """Flushes what changed (at most every ``FLUSH_S``) and reads stop requests (every
        ``POLL_S``). True when the user asked the whole experiment to stop."""
        now = time.monotonic()
        if not force and now - self.last_poll >= POLL_S:
            self.last_poll = now
            self._apply_stops()
        if force or now - self.last_flush >= FLUSH_S:
            self.last_flush = now
            self._flush()
        return bool(self.stop_reason)

    def _apply_stops(self) -> None:
        raw = self.outbox.watched  # read by the outbox's thread every POLL_S
        if not raw:
            return
        try:
            asked = json.loads(raw)
        except ValueError:
            return
        for trial_id, request in (asked.get("trials") or {}).items():
            trial = self.loop.by_id.get(trial_id)
            if trial is None or trial_id in self.stop_reasons or trial.is_finished:
                continue
            reason = (request or {}).get("reason") or "stopped by the user"
            self.stop_reasons[trial_id] = reason
            print(
                f"ember.tune: trial {trial.trial_name} stopped at the user's request: {reason}",
                file=sys.stderr,
                flush=True,
            )
            self.loop.stop_trial(trial)
            self._touch(trial)
        request = asked.get("experiment")
        if request and not self.stop_reason:
            # The status stays RUNNING until the trials have ended (on_experiment_end).
            self.stop_reason = request.get("reason") or "stopped by the user"
            print(
                f"ember.tune: experiment {self.name} stopped at the user's request: "
                f"{self.stop_reason}",
                file=sys.stderr,
                flush=True,
            )
            for trial in self.loop.trials:
                if trial.status == RUNNING:
                    self.stop_reasons.setdefault(trial.trial_id, self.stop_reason)

    # --- records --------------------------------------------------------------------------
    def _touch(self, trial: Trial) -> None:
        place = self.index.setdefault(trial.trial_id, len(self.index))
        self.dirty.add(place // CHUNK)

    def _row(self, trial: Trial) -> dict[str, Any]:
        last = trial.last_result or {}
        name, actor_id = self.actors.get(trial.trial_id, ("", ""))
        return {
            "trial_id": trial.trial_id,
            "trial_name": trial.trial_name,
            "status": trial.status,
            "config": _jsonable(trial.config),
            # NaN and infinities are not JSON: shown as no value.
            "metrics": {
                k: {kind: _number(x) for kind, x in v.items()}
                for k, v in trial.metric_analysis.items()
                if k not in AUTO_FIELDS
            },
            "iterations": last.get("training_iteration", 0),
            "time_total_s": last.get("time_total_s", 0.0),
            "start_time": trial.start_time,
            "actor_name": name,
            "actor_id": actor_id,
            "num_failures": trial.num_failures,
            "error": trial.error_msg if trial.status == ERROR or trial.error_msg else None,
            "stop_reason": self.stop_reasons.get(trial.trial_id),
            "logdir": trial.local_path,
        }

    def _flush(self) -> None:
        trials = self.loop.trials
        for trial in trials:
            # Status changes the callbacks do not hear of (paused, requeued) mark a chunk too.
            sig = (trial.status, trial.num_failures, trial.trial_id in self.stop_reasons)
            if self.signatures.get(trial.trial_id) != sig:
                self.signatures[trial.trial_id] = sig
                self._touch(trial)
        by_place = {place: tid for tid, place in self.index.items()}
        chunks = (len(self.index) + CHUNK - 1) // CHUNK
        while len(self.versions) < chunks:
            self.versions.append(0)
        for chunk in sorted(self.dirty):
            ids = [
                by_place[p] for p in range(chunk * CHUNK, min(len(by_place), (chunk + 1) * CHUNK))
            ]
            rows = [self._row(self.loop.by_id[t]) for t in ids if t in self.loop.by_id]
            self.outbox.put(trials_key(self.name, chunk), json.dumps(rows).encode())
            self.versions[chunk] += 1
        self.dirty.clear()
        # Curves first, the record last: a reader that sees a new version finds its curves.
        for trial_id in sorted(self.dirty_curves):
            blob = json.dumps(self.curves[trial_id].to_json()).encode()
            self.outbox.put(curves_key(self.name, trial_id), blob)
        self.dirty_curves.clear()
        counts: dict[str, int] = {}
        for trial in trials:
            counts[trial.status] = counts.get(trial.status, 0) + 1
        record = {
            **self.header,
            "status": self.status,
            "stop_reason": self.stop_reason,
            "start_time": self.start_time,
            "end_time": self.end_time,
            "updated": time.time(),
            "num_trials": len(self.index),
            "status_counts": counts,
            "chunks": self.versions,
        }
        self.outbox.put(exp_key(self.name), json.dumps(record).encode())


def install(controller: Any) -> list[Callback]:
    """The publisher for ``controller``'s experiment, when the driver is connected to a
    cluster (a local-mode driver has no GCS: nothing to publish to)."""
    worker = global_state.worker
    call = getattr(worker, "call_gcs_sync", None)
    if worker is None or call is None or getattr(worker, "local_mode", False):
        return []
    publisher = Publisher(controller, call)
    controller.loop.stopper = UserStopper(controller.loop.stopper, publisher)
    return [publisher]
