"""``ray.tune.suggest.optuna``: ``ember.tune.search.optuna``."""

from ember.tune.search.optuna import OptunaSearch

__all__ = ["OptunaSearch"]
