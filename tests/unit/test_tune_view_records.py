"""The Tune view's record contract without a cluster: the publisher's curves stay bounded and
evenly spread with the newest point kept, and the dashboard's store turns published rows into
the table's columns and picks the best trial as ``get_best_result`` does (last result)."""

from __future__ import annotations

from ember.dashboard.tune.store import TuneStore, flat_row
from ember.tune.publish import CURVE_POINTS, Curve


def test_curves_are_thinned_evenly_and_keep_the_newest_point():
    curve = Curve()
    for i in range(1, 1001):
        curve.add({"training_iteration": i, "time_total_s": i / 10, "loss": 1 / i, "pid": 7})
    out = curve.to_json()
    assert len(out["iter"]) <= CURVE_POINTS + 1
    assert out["iter"][0] == 1 and out["iter"][-1] == 1000  # the whole run, the newest too
    gaps = {b - a for a, b in zip(out["iter"][:-2], out["iter"][1:-1], strict=True)}
    assert len(gaps) == 1, gaps  # evenly spaced (the newest point aside)
    assert set(out["metrics"]) == {"loss"}  # auto-filled fields are not curves
    assert out["metrics"]["loss"][-1] == 1 / 1000
    assert out["time"][-1] == 100.0


def test_few_results_are_kept_whole():
    curve = Curve()
    for i in range(1, 6):
        curve.add({"training_iteration": i, "time_total_s": float(i), "acc": i / 5})
    assert curve.to_json() == {
        "iter": [1, 2, 3, 4, 5],
        "time": [1.0, 2.0, 3.0, 4.0, 5.0],
        "metrics": {"acc": [0.2, 0.4, 0.6, 0.8, 1.0]},
    }


def test_rows_become_columns_and_the_best_trial_is_by_the_last_result():
    def row(tid: str, lr: float, last: float, low: float) -> dict:
        return {
            "trial_id": tid,
            "status": "RUNNING",
            "config": {"lr": lr, "net": {"layers": 2}},
            "metrics": {"loss": {"last": last, "min": low, "max": 9.0}},
            "iterations": 3,
        }

    flat = flat_row(row("a", 0.1, 0.5, 0.2), "loss", "min")
    assert flat["config/lr"] == 0.1 and flat["config/net/layers"] == 2
    assert flat["last/loss"] == 0.5 and flat["best/loss"] == 0.2
    assert flat_row(row("a", 0.1, 0.5, 0.2), "loss", "max")["best/loss"] == 9.0
    # Another metric than the experiment's has no "best": its min and max.
    other = flat_row(row("a", 0.1, 0.5, 0.2), "acc", "max")
    assert "best/loss" not in other and (other["min/loss"], other["max/loss"]) == (0.2, 9.0)
    store = TuneStore()
    record = {"name": "e", "metric": "loss", "mode": "min", "status": "RUNNING", "chunks": [1]}
    # b's best value (0.1) is lower, but a's last (0.3) is: a is the best, as in Ray.
    store.apply(
        {"exp": record, "chunks": {"0": [row("a", 0.1, 0.3, 0.3), row("b", 0.2, 0.4, 0.1)]}}
    )
    exp = store.get("e")
    assert exp.best_trial_id == "a" and exp.best_value == 0.3
    assert exp.columns[:2] == ["trial_id", "status"] and exp.columns[-1] == "error"
    assert {"config/lr", "last/loss", "best/loss"} <= set(exp.columns)
    assert exp.where == {"a": 0, "b": 0}
