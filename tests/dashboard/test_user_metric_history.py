"""The Metrics page's application metric history: merged as /metrics merges them, bounded."""

from __future__ import annotations

from ember.dashboard import history
from ember.dashboard.history import UserMetricHistory, user_series


def _snap(value: float, kind: str = "gauge") -> dict:
    series = (
        {"tags": {"q": "a"}, "buckets": [1, 1], "sum": 3.0}
        if kind == "histogram"
        else {"tags": {"q": "a"}, "value": value}
    )
    return {
        "metrics": [
            {
                "name": "m",
                "type": kind,
                "tag_keys": ["q"],
                "boundaries": [1.0] if kind == "histogram" else None,
                "series": [series],
            }
        ]
    }


def test_series_are_keyed_by_name_and_tags_and_histograms_read_as_their_mean():
    assert user_series([_snap(4.0)])["m{q=a}"]["value"] == 4.0
    assert user_series([_snap(0, "histogram")])["m{q=a}"]["value"] == 1.5


def test_history_keeps_a_reading_per_period_within_its_window_and_caps_series(monkeypatch):
    h = UserMetricHistory(seconds=10, period=2)
    assert h.due(0.0)
    h.add(0.0, [_snap(1.0)])
    assert not h.due(1.0) and h.due(2.0)
    h.add(2.0, [_snap(2.0)])
    h.add(11.0, [_snap(3.0)])  # the first reading is older than the window now
    q = h.query()
    assert q["times"] == [2.0, 11.0]
    assert q["series"][0]["key"] == "m{q=a}" and q["series"][0]["values"] == [2.0, 3.0]
    assert h.query(since=5.0)["times"] == [11.0]
    monkeypatch.setattr(history, "MAX_USER_SERIES", 1)
    snap = _snap(1.0)
    snap["metrics"][0]["name"] = "other"
    h.add(12.0, [snap])
    assert h.dropped_series == 1 and [s["name"] for s in h.query()["series"]] == ["m"]
