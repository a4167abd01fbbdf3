"""Ray Tune's API on Ember (``from ember import tune``): search spaces and searchers, trial
schedulers, stoppers, and the Tuner / tune.run that run trials as Ember actors.

A library above the runtime: it uses only Ember's public API, and nothing in the runtime
imports it.
"""

from ember.tune import schedulers, search, stopper
from ember.tune.analysis import ExperimentAnalysis
from ember.tune.callback import Callback
from ember.tune.checkpoint import Checkpoint
from ember.tune.config import CheckpointConfig, FailureConfig, RunConfig, TuneConfig
from ember.tune.resources import PlacementGroupFactory, with_parameters, with_resources
from ember.tune.result_grid import Result, ResultGrid
from ember.tune.run import Experiment, TuneError, run, run_experiments
from ember.tune.search.sample import (
    choice,
    grid_search,
    lograndint,
    loguniform,
    qlograndint,
    qloguniform,
    qrandint,
    qrandn,
    quniform,
    randint,
    randn,
    sample_from,
    uniform,
)
from ember.tune.stopper import Stopper
from ember.tune.trainable.session import get_checkpoint, get_context, report, track
from ember.tune.trainable.trainable import Trainable
from ember.tune.tuner import Tuner

__all__ = [
    "Callback",
    "Checkpoint",
    "CheckpointConfig",
    "Experiment",
    "ExperimentAnalysis",
    "FailureConfig",
    "PlacementGroupFactory",
    "Result",
    "ResultGrid",
    "RunConfig",
    "Stopper",
    "Trainable",
    "TuneConfig",
    "TuneError",
    "Tuner",
    "choice",
    "get_checkpoint",
    "get_context",
    "grid_search",
    "lograndint",
    "loguniform",
    "qlograndint",
    "qloguniform",
    "qrandint",
    "qrandn",
    "quniform",
    "randint",
    "randn",
    "report",
    "run",
    "run_experiments",
    "sample_from",
    "schedulers",
    "search",
    "stopper",
    "track",
    "uniform",
    "with_parameters",
    "with_resources",
]
