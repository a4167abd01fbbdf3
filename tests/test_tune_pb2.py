"""PB2's GP-UCB step (``ember.tune.schedulers.pb2_gp``), on synthetic observations, no cluster:
what it picks stays within the bounds, follows where the reward grows fastest, and moves away
from values other trials are already trying. PB2 on real trials is in test_tune_run.py."""

from __future__ import annotations

import numpy as np
import pytest
from ember.tune.schedulers import PB2
from ember.tune.schedulers.pb2_gp import select


def observations(rng, n=40):
    """Reward change per step = 2 * lr (lr in [0, 1]), plus noise; time and reward vary."""
    lr = rng.uniform(0, 1, n)
    t = rng.uniform(1, 20, n)
    reward = rng.uniform(0, 5, n)
    x = np.column_stack([t, reward, lr])
    y = 2 * lr + rng.normal(0, 0.05, n)
    return x, y


def test_the_pick_is_within_bounds_and_follows_the_fastest_growth():
    rng = np.random.default_rng(0)
    x, y = observations(rng)
    low, high = np.array([0.0]), np.array([1.0])
    picks = [select(x, y, np.array([10.0, 2.5]), low, high, None, rng)[0] for _ in range(5)]
    assert all(0.0 <= p <= 1.0 for p in picks)
    assert min(picks) > 0.8, picks  # the reward grows fastest at high lr: exploit it


def test_pending_values_push_the_next_pick_elsewhere():
    rng = np.random.default_rng(1)
    lr = np.array([0.0, 0.1, 0.2])  # only low values observed, all growing alike
    x = np.column_stack([np.array([4.0, 5.0, 6.0]), np.zeros(3), lr])
    y = np.ones(3)  # the mean says nothing: the pick follows the uncertainty
    low, high = np.array([0.0]), np.array([1.0])
    alone = select(x, y, np.array([5.0, 0.0]), low, high, None, rng)[0]
    assert alone > 0.9  # farthest from what was observed
    beside = select(x, y, np.array([5.0, 0.0]), low, high, np.array([[alone]]), rng)[0]
    assert 0.2 < beside < alone - 0.1  # another trial tries `alone` already: elsewhere


def test_bad_bounds_are_named():
    with pytest.raises(ValueError, match="PB2 needs hyperparam_bounds"):
        PB2(metric="score", mode="max")
    with pytest.raises(ValueError, match=r"hyperparam_bounds\['lr'\]: min 1.0 must be below"):
        PB2(hyperparam_bounds={"lr": [1, 0]})
    with pytest.raises(ValueError, match=r"hyperparam_bounds\['lr'\] must be \[min, max\]"):
        PB2(hyperparam_bounds={"lr": "fast"})
