"""``ember.util.metrics``: application metrics (``Counter``, ``Gauge``, ``Histogram`` with
tags) recorded in tasks, actors and drivers, in Ray's API (``ray.util.metrics``).

How they travel: each process keeps its series in memory and, while any changed, a daemon
thread writes a snapshot every ``metrics_report_interval`` seconds to
``<session>/metrics/<pid>.json`` (atomically, by rename). The node's agent reads that folder
on its metrics cycle (``read_node_snapshots``) and ships the snapshots with the node's other
metrics; the dashboard merges them across processes and nodes (``merge_snapshots``) and
exports them on ``/metrics`` as ``ember_<name>``. A file, not a message to the raylet, so a
process that records metrics needs no connection of its own and the runtime's hot path never
carries them.

Bounds: at most ``MAX_SERIES_PER_METRIC`` tag combinations per metric and ``MAX_METRICS``
metrics per process; what does not fit is dropped and counted (``dropped_series``), and the
count is exported too.
"""

from __future__ import annotations

import atexit
import bisect
import json
import os
import re
import threading
import time
from typing import Any

from ember import global_state

MAX_SERIES_PER_METRIC = int(os.environ.get("EMBER_METRICS_MAX_SERIES", "1000"))
MAX_METRICS = int(os.environ.get("EMBER_METRICS_MAX_METRICS", "500"))
REPORT_INTERVAL = float(os.environ.get("EMBER_METRICS_REPORT_INTERVAL", "1.0"))
METRICS_DIR = "metrics"

_NAME_RE = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_TAG_RE = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
DEFAULT_BOUNDARIES = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class _Registry:
    """This process's metrics: {name: Metric}; one lock for recording and snapshots."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.metrics: dict[str, Metric] = {}
        self.dropped_series = 0
        self.dropped_metrics = 0
        self.version = 0  # bumped on every record; the flusher writes when it moved
        self._written_version = -1
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def register(self, metric: Metric) -> bool:
        with self.lock:
            existing = self.metrics.get(metric.name)
            if existing is not None and (
                existing.kind != metric.kind
                or existing.tag_keys != metric.tag_keys
                or getattr(existing, "boundaries", None) != getattr(metric, "boundaries", None)
            ):
                raise ValueError(
                    f"A metric named {metric.name!r} already exists in this process as a "
                    f"{existing.kind} with tag_keys={existing.tag_keys}; a second definition "
                    "must match it, or pick another name."
                )
            if existing is None and len(self.metrics) >= MAX_METRICS:
                self.dropped_metrics += 1
                return False
            # Re-creating a metric (an actor restarted, a task ran twice) continues its series.
            if existing is not None:
                metric._series = existing._series
            self.metrics[metric.name] = metric
            return True

    def touched(self) -> None:
        self.version += 1
        if self._thread is None:
            self._start()

    def _start(self) -> None:
        with self.lock:
            if self._thread is not None:
                return
            self._thread = threading.Thread(
                target=self._run, name="ember-metrics-flush", daemon=True
            )
            self._thread.start()
        atexit.register(self.flush)

    def _run(self) -> None:
        while not self._stop.wait(REPORT_INTERVAL):
            try:
                self.flush()
            except OSError:
                pass  # the session dir went away (shutdown); the next cycle tries again

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            # A metric with no series yet (defined, or carried into a new session) has
            # nothing to show: Prometheus would list a family with no samples.
            metrics = [m._snapshot() for m in self.metrics.values() if m._series]
            return {
                "pid": os.getpid(),
                "time": time.time(),
                "dropped_series": self.dropped_series,
                "dropped_metrics": self.dropped_metrics,
                "metrics": metrics,
            }

    def flush(self) -> str | None:
        """Writes the snapshot if anything changed since the last write; returns the path."""
        directory = metrics_dir()
        if directory is None or self.version == self._written_version:
            return None
        version = self.version
        snap = self.snapshot()
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, f"{os.getpid()}.json")
        tmp = f"{path}.tmp"
        with open(tmp, "w") as f:
            json.dump(snap, f)
        os.replace(tmp, path)
        self._written_version = version
        return path


def end_session() -> None:
    """At ``ember.shutdown()``: the last snapshot goes to the session ending, and the series
    start from nothing in the next one (a driver that calls ``init`` again records into a new
    cluster, which must not show the old one's counts). The metrics stay defined."""
    try:
        _registry.flush()
    except OSError:
        pass  # the session dir is gone: nothing to write to
    with _registry.lock:
        for metric in _registry.metrics.values():
            metric._series.clear()  # shared with any re-definition of it: cleared for both
        _registry.version += 1  # the next session's first write is not skipped as unchanged


def metrics_dir(session_dir: str | None = None) -> str | None:
    """Where this process's node keeps metric snapshots (None before ``ember.init``)."""
    if session_dir is None:
        worker = global_state.worker
        node = getattr(worker, "node", None) if worker is not None else None
        session_dir = node.get("session_dir") if isinstance(node, dict) else None
    return os.path.join(session_dir, METRICS_DIR) if session_dir else None


_registry = _Registry()


def flush() -> str | None:
    """Writes this process's metrics now (tests and short drivers; normally periodic)."""
    return _registry.flush()


class Metric:
    """The common part: name, description, tag keys, default tags, bounded series."""

    kind = "metric"

    def __init__(
        self, name: str, description: str = "", tag_keys: tuple[str, ...] | None = None
    ) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError("A metric needs a non-empty name, e.g. Counter('requests').")
        if not _NAME_RE.match(name):
            raise ValueError(
                f"Invalid metric name {name!r}: use letters, digits, '_' and ':', not "
                "starting with a digit (Prometheus' rule)."
            )
        if tag_keys is None:
            tag_keys = ()
        if not isinstance(tag_keys, tuple | list) or not all(isinstance(k, str) for k in tag_keys):
            raise TypeError(f"tag_keys must be a tuple of strings, got {tag_keys!r}.")
        for key in tag_keys:
            if not _TAG_RE.match(key):
                raise ValueError(f"Invalid tag key {key!r} for metric {name!r}.")
        self.name = name
        self.description = description or ""
        self.tag_keys = tuple(tag_keys)
        self._default_tags: dict[str, str] = {}
        self._series: dict[tuple[str, ...], Any] = {}
        self._registered = _registry.register(self)

    def set_default_tags(self, default_tags: dict[str, str]) -> Metric:
        """Tags used by every record call unless it passes its own; returns the metric."""
        for key in default_tags:
            if key not in self.tag_keys:
                raise ValueError(
                    f"Unknown tag {key!r} for metric {self.name!r}; its tag_keys are "
                    f"{self.tag_keys}."
                )
        self._default_tags = {k: str(v) for k, v in default_tags.items()}
        return self

    @property
    def info(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "tag_keys": self.tag_keys,
            "default_tags": dict(self._default_tags),
        }

    def _key(self, tags: dict[str, str] | None) -> tuple[str, ...]:
        merged = dict(self._default_tags)
        if tags:
            for key, value in tags.items():
                if key not in self.tag_keys:
                    raise ValueError(
                        f"Unknown tag {key!r} for metric {self.name!r}; declare it in "
                        f"tag_keys={self.tag_keys + (key,)}."
                    )
                merged[key] = str(value)
        missing = [k for k in self.tag_keys if k not in merged]
        if missing:
            raise ValueError(
                f"Missing value for tag(s) {missing} of metric {self.name!r}: pass them in "
                "tags={...} or set them with set_default_tags()."
            )
        return tuple(merged[k] for k in self.tag_keys)

    def _slot(self, key: tuple[str, ...], new: Any) -> Any:
        """The series for ``key``, created with ``new()``; None when the bound is reached."""
        series = self._series.get(key)
        if series is None:
            if len(self._series) >= MAX_SERIES_PER_METRIC:
                _registry.dropped_series += 1
                return None
            series = self._series[key] = new()
        return series

    def _snapshot(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "type": self.kind,
            "description": self.description,
            "tag_keys": list(self.tag_keys),
            "series": [
                {"tags": dict(zip(self.tag_keys, k, strict=True)), **self._value_of(v)}
                for k, v in self._series.items()
            ],
        }

    def _value_of(self, series: Any) -> dict[str, Any]:
        return {"value": series[0], "time": series[1]}


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{what} must be a number, got {type(value).__name__}.")
    return float(value)


class Counter(Metric):
    """A cumulative count that only goes up; exported as ``ember_<name>_total``."""

    kind = "counter"

    def inc(self, value: int | float = 1.0, tags: dict[str, str] | None = None) -> None:
        value = _number(value, f"Counter {self.name!r} increment")
        if value <= 0:
            raise ValueError(f"Counter {self.name!r} can only go up: inc({value}) must be > 0.")
        key = self._key(tags)
        with _registry.lock:
            series = self._slot(key, lambda: [0.0, 0.0])
            if series is None:
                return
            series[0] += value
            series[1] = time.time()
        _registry.touched()


class Gauge(Metric):
    """The last value set; exported as ``ember_<name>``."""

    kind = "gauge"

    def set(self, value: int | float, tags: dict[str, str] | None = None) -> None:
        value = _number(value, f"Gauge {self.name!r} value")
        key = self._key(tags)
        with _registry.lock:
            series = self._slot(key, lambda: [0.0, 0.0])
            if series is None:
                return
            series[0] = value
            series[1] = time.time()
        _registry.touched()


class Histogram(Metric):
    """Observations counted in buckets with upper ``boundaries`` (plus sum and count)."""

    kind = "histogram"

    def __init__(
        self,
        name: str,
        description: str = "",
        boundaries: list[float] | None = None,
        tag_keys: tuple[str, ...] | None = None,
    ) -> None:
        bounds = list(DEFAULT_BOUNDARIES if boundaries is None else boundaries)
        if not bounds:
            raise ValueError(f"Histogram {name!r} needs at least one bucket boundary.")
        for b in bounds:
            _number(b, f"Histogram {name!r} boundary")
        if any(b <= 0 for b in bounds) or bounds != sorted(set(bounds)):
            raise ValueError(
                f"Histogram {name!r} boundaries must be positive and strictly increasing, "
                f"got {bounds}."
            )
        self.boundaries = [float(b) for b in bounds]
        super().__init__(name, description, tag_keys)

    def observe(self, value: int | float, tags: dict[str, str] | None = None) -> None:
        value = _number(value, f"Histogram {self.name!r} observation")
        key = self._key(tags)
        slot = bisect.bisect_left(self.boundaries, value)  # bucket i holds value <= bound i
        n = len(self.boundaries) + 1
        with _registry.lock:
            series = self._slot(key, lambda: {"buckets": [0] * n, "sum": 0.0, "count": 0})
            if series is None:
                return
            series["buckets"][slot] += 1
            series["sum"] += value
            series["count"] += 1
        _registry.touched()

    @property
    def info(self) -> dict[str, Any]:
        return {**super().info, "boundaries": list(self.boundaries)}

    def _snapshot(self) -> dict[str, Any]:
        return {**super()._snapshot(), "boundaries": list(self.boundaries)}

    def _value_of(self, series: Any) -> dict[str, Any]:
        return {"buckets": list(series["buckets"]), "sum": series["sum"], "count": series["count"]}


# -- the reading side: the agent and the dashboard ------------------------------------------


def read_node_snapshots(session_dir: str) -> list[dict[str, Any]]:
    """Every live process's latest snapshot on this node; files of dead processes are
    removed (their counters end with them, as a restarted Prometheus target's would)."""
    directory = metrics_dir(session_dir)
    out: list[dict[str, Any]] = []
    try:
        names = os.listdir(directory)
    except OSError:
        return out
    for name in names:
        if not name.endswith(".json"):
            continue
        path = os.path.join(directory, name)
        try:
            pid = int(name[:-5])
        except ValueError:
            continue
        if not _alive(pid):
            try:
                os.unlink(path)
            except OSError:
                pass
            continue
        try:
            with open(path) as f:
                out.append(json.load(f))
        except (OSError, ValueError):
            continue  # being replaced this instant; the next cycle reads it
    return out


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def merge_snapshots(snapshots: list[dict[str, Any]]) -> dict[str, Any]:
    """One view of many processes' metrics: counters and histograms add up per tag set,
    a gauge keeps the most recently set value. Returns {"metrics": {name: {...}},
    "dropped_series": n, "conflicts": [names recorded with two types or tag sets]}."""
    merged: dict[str, dict[str, Any]] = {}
    dropped = 0
    conflicts: set[str] = set()
    for snap in snapshots:
        dropped += int(snap.get("dropped_series", 0)) + int(snap.get("dropped_metrics", 0))
        for m in snap.get("metrics", ()):
            name = m["name"]
            into = merged.get(name)
            if into is None:
                into = merged[name] = {
                    "name": name,
                    "type": m["type"],
                    "description": m.get("description", ""),
                    "tag_keys": list(m.get("tag_keys", ())),
                    "boundaries": m.get("boundaries"),
                    "series": {},
                }
            elif (
                into["type"] != m["type"]
                or into["tag_keys"] != list(m.get("tag_keys", ()))
                or into["boundaries"] != m.get("boundaries")
            ):
                conflicts.add(name)  # exporting both would break the text format
                continue
            for s in m["series"]:
                key = tuple(s["tags"].get(k, "") for k in into["tag_keys"])
                _merge_series(into, key, s)
    return {"metrics": merged, "dropped_series": dropped, "conflicts": sorted(conflicts)}


def _merge_series(into: dict[str, Any], key: tuple[str, ...], s: dict[str, Any]) -> None:
    have = into["series"].get(key)
    kind = into["type"]
    if have is None:
        into["series"][key] = dict(s, buckets=list(s["buckets"])) if "buckets" in s else dict(s)
    elif kind == "counter":
        have["value"] += s["value"]
    elif kind == "gauge":
        if s.get("time", 0) >= have.get("time", 0):
            have["value"], have["time"] = s["value"], s.get("time", 0)
    else:
        have["buckets"] = [a + b for a, b in zip(have["buckets"], s["buckets"], strict=True)]
        have["sum"] += s["sum"]
        have["count"] += s["count"]


__all__ = ["Counter", "Gauge", "Histogram", "flush", "merge_snapshots", "read_node_snapshots"]
