"""``ember.util.metrics`` (Ray's ``ray.util.metrics`` API): checks on bad use, the merge of
many processes' series, and the way to ``/metrics`` from a task, an actor and the driver."""

from __future__ import annotations

import json
import os
import urllib.request

import ember
import pytest
from ember.util import metrics
from ember.util.metrics import Counter, Gauge, Histogram, merge_snapshots
from ember_test_utils import wait_until

pytestmark = pytest.mark.timeout(120)


def test_bad_use_is_a_clear_error():
    with pytest.raises(ValueError, match="Invalid metric name '1bad'"):
        Counter("1bad")
    with pytest.raises(TypeError, match="tag_keys must be a tuple of strings"):
        Counter("tk_bad", tag_keys="route")  # a string, not a tuple
    c = Counter("um_requests", tag_keys=("route",))
    with pytest.raises(ValueError, match=r"Missing value for tag\(s\) \['route'\]"):
        c.inc()
    with pytest.raises(ValueError, match="Unknown tag 'colour'"):
        c.inc(1, {"route": "/", "colour": "red"})
    with pytest.raises(ValueError, match="can only go up"):
        c.inc(-1, {"route": "/"})
    with pytest.raises(TypeError, match="must be a number"):
        Gauge("um_gauge").set("12")
    with pytest.raises(ValueError, match="strictly increasing"):
        Histogram("um_hist_bad", boundaries=[1, 1, 2])
    with pytest.raises(ValueError, match="already exists in this process as a counter"):
        Gauge("um_requests")
    # set_default_tags returns the metric, as Ray's does, and fills the missing tag.
    assert c.set_default_tags({"route": "/home"}) is c
    c.inc()
    assert c.info["default_tags"] == {"route": "/home"}


def test_series_past_the_bound_are_dropped_and_counted(monkeypatch):
    monkeypatch.setattr(metrics, "MAX_SERIES_PER_METRIC", 3)
    before = metrics._registry.dropped_series
    g = Gauge("um_bounded", tag_keys=("i",))
    for i in range(5):
        g.set(i, {"i": str(i)})
    assert metrics._registry.dropped_series - before == 2
    snap = metrics._registry.snapshot()
    mine = next(m for m in snap["metrics"] if m["name"] == "um_bounded")
    assert len(mine["series"]) == 3 and snap["dropped_series"] >= 2


def test_merge_adds_counters_and_histograms_and_keeps_the_newest_gauge():
    def snap(pid, value, t, buckets):
        return {
            "pid": pid,
            "dropped_series": 1,
            "metrics": [
                {
                    "name": "c",
                    "type": "counter",
                    "tag_keys": ["k"],
                    "series": [{"tags": {"k": "a"}, "value": value, "time": t}],
                },
                {
                    "name": "g",
                    "type": "gauge",
                    "tag_keys": [],
                    "series": [{"tags": {}, "value": value, "time": t}],
                },
                {
                    "name": "h",
                    "type": "histogram",
                    "tag_keys": [],
                    "boundaries": [1.0],
                    "series": [
                        {"tags": {}, "buckets": buckets, "sum": value, "count": sum(buckets)}
                    ],
                },
                # The same name with another type in this process: left out, reported.
                {
                    "name": "x",
                    "type": "counter" if pid == 1 else "gauge",
                    "tag_keys": [],
                    "series": [{"tags": {}, "value": 1, "time": t}],
                },
            ],
        }

    merged = merge_snapshots([snap(1, 2.0, 10.0, [1, 0]), snap(2, 5.0, 5.0, [0, 3])])
    m = merged["metrics"]
    assert m["c"]["series"][("a",)]["value"] == 7.0
    assert m["g"]["series"][()]["value"] == 2.0  # pid 1 set it last (t=10)
    assert m["h"]["series"][()]["buckets"] == [1, 3] and m["h"]["series"][()]["count"] == 4
    assert merged["conflicts"] == ["x"] and merged["dropped_series"] == 2


def test_task_actor_and_driver_metrics_reach_the_dashboard(ember_start):
    ctx = ember_start(num_cpus=2)

    @ember.remote
    def handle(ms):
        Histogram(
            "um_latency_seconds", "task latency", boundaries=[0.01, 0.1], tag_keys=("route",)
        ).observe(ms / 1000, {"route": "/api"})
        return os.getpid()

    @ember.remote
    class Queue:
        def __init__(self):
            self.depth = Gauge("um_queue_depth", "items waiting", tag_keys=("queue",))
            self.depth.set_default_tags({"queue": "main"})

        def put(self, n):
            self.depth.set(n)
            return n

    pids = set(ember.get([handle.remote(ms) for ms in (5, 50, 500)]))
    q = Queue.remote()
    assert ember.get(q.put.remote(17)) == 17
    Counter("um_driver_events_total", "events seen by the driver").inc(3)

    def scrape() -> str | None:
        with urllib.request.urlopen(ctx.dashboard_url + "/metrics", timeout=10) as resp:
            text = resp.read().decode()
        wanted = ("um_latency_seconds_count", "um_queue_depth", "um_driver_events_total")
        return text if all(w in text for w in wanted) else None

    text = wait_until(scrape, timeout=30, interval=0.3, message="application metrics on /metrics")
    lines = set(text.splitlines())
    assert 'ember_um_latency_seconds_bucket{le="0.01",route="/api"} 1.0' in lines
    assert 'ember_um_latency_seconds_bucket{le="0.1",route="/api"} 2.0' in lines
    assert 'ember_um_latency_seconds_bucket{le="+Inf",route="/api"} 3.0' in lines
    assert 'ember_um_latency_seconds_count{route="/api"} 3.0' in lines
    assert 'ember_um_queue_depth{queue="main"} 17.0' in lines
    assert "ember_um_driver_events_total 3.0" in lines
    assert "# TYPE ember_um_driver_events_total counter" in lines
    # The snapshots are files named by pid: one per process that recorded something.
    files = os.listdir(os.path.join(ctx.session_dir, "metrics"))
    assert {f"{p}.json" for p in pids} <= set(files)
    with open(os.path.join(ctx.session_dir, "metrics", f"{os.getpid()}.json")) as f:
        assert json.load(f)["pid"] == os.getpid()


def test_a_drivers_metrics_start_from_nothing_in_its_next_session(ember_start):
    events = Counter("um_session_events_total", "events the driver saw")
    old_only = Gauge("um_old_session_only", "set in the first session only")
    ctx = ember_start(num_cpus=1)
    events.inc(5)
    old_only.set(7)
    assert metrics.flush()
    ember.shutdown()
    ctx = ember_start(num_cpus=1)
    events.inc(1)  # the same metric object, in the new session

    def scrape() -> str | None:
        with urllib.request.urlopen(ctx.dashboard_url + "/metrics", timeout=10) as resp:
            text = resp.read().decode()
        return text if "ember_um_session_events_total " in text else None

    lines = set(wait_until(scrape, 30, 0.3, "the counter on /metrics").splitlines())
    assert "ember_um_session_events_total 1.0" in lines  # not 6: the old cluster's 5 stayed there
    # Not recorded in this session: no family at all, not one with no samples.
    assert not [line for line in lines if "um_old_session_only" in line]
