"""Trial schedulers (``ember.tune.schedulers``): pure answers to each result."""

from ember.tune.schedulers.async_hyperband import ASHAScheduler, AsyncHyperBandScheduler
from ember.tune.schedulers.hyperband import HyperBandScheduler
from ember.tune.schedulers.median_stopping import MedianStoppingRule
from ember.tune.schedulers.pb2 import PB2
from ember.tune.schedulers.pbt import PopulationBasedTraining
from ember.tune.schedulers.trial_scheduler import FIFOScheduler, TrialScheduler

__all__ = [
    "ASHAScheduler",
    "AsyncHyperBandScheduler",
    "FIFOScheduler",
    "HyperBandScheduler",
    "MedianStoppingRule",
    "PB2",
    "PopulationBasedTraining",
    "TrialScheduler",
]
