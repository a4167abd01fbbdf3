"""Ray Tune's API on Ember (``from ember import tune``): search spaces and searchers, trial
schedulers, stoppers, and the Tuner / tune.run that run trials as Ember actors.

A library above the runtime: it uses only Ember's public API, and nothing in the runtime
imports it. Names load on first use (PEP 562): a trial's worker imports this package to
unpickle its trainable and to call ``tune.report``, and need not load NumPy, the schedulers
or the controller for that.
"""

from __future__ import annotations

from ember.lazy_exports import lazy_exports

_SAMPLE = "ember.tune.search.sample"
_PUBLIC: dict[str, str | None] = {
    "Callback": "ember.tune.callback",
    "CLIReporter": "ember.tune.progress",
    "JupyterNotebookReporter": "ember.tune.progress",
    "Checkpoint": "ember.tune.checkpoint",
    "CheckpointConfig": "ember.tune.config",
    "FailureConfig": "ember.tune.config",
    "RunConfig": "ember.tune.config",
    "TuneConfig": "ember.tune.config",
    "Experiment": "ember.tune.run",
    "TuneError": "ember.tune.run",
    "run": "ember.tune.run",
    "run_experiments": "ember.tune.run",
    "Analysis": "ember.tune.analysis",
    "ExperimentAnalysis": "ember.tune.analysis",
    "ProgressReporter": "ember.tune.progress",
    "register_env": "ember.tune.registry",
    "register_trainable": "ember.tune.registry",
    "PlacementGroupFactory": "ember.tune.resources",
    "with_parameters": "ember.tune.resources",
    "with_resources": "ember.tune.resources",
    "Result": "ember.tune.result_grid",
    "ResultGrid": "ember.tune.result_grid",
    "Stopper": "ember.tune.stopper",
    "Trainable": "ember.tune.trainable.trainable",
    "Tuner": "ember.tune.tuner",
    "get_checkpoint": "ember.tune.trainable.session",
    "get_context": "ember.tune.trainable.session",
    "report": "ember.tune.trainable.session",
    "track": "ember.tune.trainable.session",
    "schedulers": None,
    "search": None,
    "stopper": None,
    **{
        name: _SAMPLE
        for name in (
            "choice",
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
            "sample_from",
            "uniform",
        )
    },
}

__getattr__, __dir__ = lazy_exports(__name__, _PUBLIC, globals())
__all__ = sorted(_PUBLIC)
