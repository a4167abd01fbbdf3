"""``ray.tune.suggest.hyperopt`` (Ray 0.8): ``ember.tune.search.hyperopt``."""

from ember.tune.search.hyperopt import HyperOptSearch

__all__ = ["HyperOptSearch"]
