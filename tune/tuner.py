"""``Tuner``: Ray 2.x's entry point. Checks everything that can be checked before a trial
starts (trainable shape, metric/mode, storage), then runs the controller."""

from __future__ import annotations

import copy
import inspect
import time
from pathlib import Path
from typing import Any

import cloudpickle
import ember
from ember.tune.config import CheckpointConfig, RunConfig, TuneConfig, default_storage_path
from ember.tune.controller import Controller, capacity
from ember.tune.files import check_storage, date_str, latest_state, unused_name, write_atomic
from ember.tune.logger import default_callbacks
from ember.tune.loop import TrialLoop
from ember.tune.progress import make_reporter
from ember.tune.resources import ATTR_RESOURCES, PlacementGroupFactory, as_resources
from ember.tune.result_grid import ResultGrid
from ember.tune.schedulers.trial_scheduler import FIFOScheduler, TrialScheduler
from ember.tune.search.basic_variant import BasicVariantGenerator, SearchAlgorithm, SearchGenerator
from ember.tune.search.convert import has_domains
from ember.tune.search.searcher import ConcurrencyLimiter, Searcher
from ember.tune.stopper import as_stopper
from ember.tune.trainable.function import wrap_function
from ember.tune.trainable.trainable import Trainable
from ember.tune.trial import ERROR, PAUSED, PENDING, RUNNING, Trial

TUNER_FILE = "tuner.pkl"


def prepare_trainable(trainable: Any) -> tuple[type, str, bool]:
    """(the Trainable class to run, its name, whether it is a function)."""
    if inspect.isclass(trainable):
        if not issubclass(trainable, Trainable):
            raise TypeError(
                f"a class trainable must subclass tune.Trainable; {trainable.__name__} does not"
            )
        return trainable, trainable.__name__, False
    if isinstance(trainable, str):
        from ember.tune.registry import get_trainable

        named = get_trainable(trainable)
        cls, _, is_function = prepare_trainable(named)
        return cls, trainable, is_function
    if not callable(trainable):
        raise TypeError(
            f"trainable must be a function or a tune.Trainable class, got {trainable!r}"
        )
    cls = wrap_function(trainable)
    return cls, getattr(trainable, "__name__", "func"), True


def trainable_resources(trainable: Any, default: Any = None) -> PlacementGroupFactory:
    marked = getattr(trainable, ATTR_RESOURCES, None)
    if marked is not None:
        return marked if isinstance(marked, PlacementGroupFactory) else as_resources(marked)
    return as_resources(default)


def make_search(search_alg: Any, tune_config: TuneConfig, param_space: dict) -> SearchAlgorithm:
    if search_alg is None:
        # max_concurrent_trials limits running trials in the loop; the generator may make
        # pending ones ahead (so the state file lists them, and a restore knows them).
        search_alg = BasicVariantGenerator()
    elif isinstance(search_alg, Searcher):
        if tune_config.max_concurrent_trials and not isinstance(search_alg, ConcurrencyLimiter):
            search_alg = ConcurrencyLimiter(search_alg, tune_config.max_concurrent_trials)
        search_alg = SearchGenerator(search_alg)
    elif not isinstance(search_alg, SearchAlgorithm):
        raise TypeError(
            f"search_alg must be a Searcher or SearchAlgorithm, got {type(search_alg).__name__}"
        )
    ok = search_alg.set_search_properties(
        tune_config.metric, tune_config.mode, param_space, tune_config.num_samples
    )
    if not ok and has_domains(param_space):
        raise ValueError(
            "You passed a `param_space` parameter to `tune.Tuner()` with unresolved "
            "parameters, but the search algorithm was already instantiated with a search "
            "space. Make sure that `param_space` does not contain any more parameter "
            "definitions - include them in the search algorithm's search space if necessary."
        )
    # A searcher that needs a space and a metric/mode says so now, before any trial starts.
    inner = getattr(search_alg, "searcher", None)
    while inner is not None:
        if hasattr(inner, "check_ready"):
            inner.check_ready()
        inner = getattr(inner, "searcher", None)
    return search_alg


def make_scheduler(scheduler: Any, tune_config: TuneConfig) -> TrialScheduler:
    scheduler = scheduler or FIFOScheduler()
    if not isinstance(scheduler, TrialScheduler):
        raise TypeError(f"scheduler must be a TrialScheduler, got {type(scheduler).__name__}")
    if not scheduler.set_search_properties(tune_config.metric, tune_config.mode):
        raise ValueError(
            f"{type(scheduler).__name__} has a different metric/mode than "
            f"TuneConfig(metric={tune_config.metric!r}, mode={tune_config.mode!r}); set them once"
        )
    missing = scheduler.missing_properties()
    if missing:
        raise ValueError(
            f"{type(scheduler).__name__} needs {' and '.join(missing)}: pass "
            f"TuneConfig({', '.join(f'{m}=...' for m in missing)}) or set them on the scheduler"
        )
    return scheduler


def check_checkpointing(config: CheckpointConfig, is_function: bool) -> None:
    if is_function and (config.checkpoint_frequency or config.checkpoint_at_end):
        raise ValueError(
            "checkpoint_frequency and checkpoint_at_end are for class trainables; a function "
            "trainable checkpoints by tune.report(metrics, checkpoint=...)"
        )


class Tuner:
    def __init__(
        self,
        trainable: Any = None,
        *,
        param_space: dict | None = None,
        tune_config: TuneConfig | None = None,
        run_config: RunConfig | None = None,
        _restored: dict | None = None,
    ) -> None:
        if trainable is None:
            raise ValueError("Tuner needs a trainable (a function or a tune.Trainable class)")
        if param_space is not None and not isinstance(param_space, dict):
            raise TypeError(f"param_space must be a dict, got {type(param_space).__name__}")
        self.trainable = trainable
        self.param_space = param_space or {}
        self.tune_config = tune_config or TuneConfig()
        self.run_config = run_config or RunConfig()
        self._restored = _restored
        self._cls, self._name, self._is_function = prepare_trainable(trainable)
        check_checkpointing(self.run_config.checkpoint_config, self._is_function)
        self._default_resources: Any = None
        # Set by tune.run from Ray 0.8's arguments (restore=, trial_name_creator=, loggers=,
        # with_server=/server_port=); a Tuner built directly leaves them unset.
        self._initial_checkpoint: tuple[str, int, float] | None = None
        self._trial_name_creator: Any = None
        self._loggers: Any = None
        self._server_port: int | None = None

    # --- restore --------------------------------------------------------------------------
    @classmethod
    def can_restore(cls, path: str | Path) -> bool:
        path = Path(path).expanduser()
        return (path / TUNER_FILE).exists() and latest_state(path) is not None

    @classmethod
    def restore(
        cls,
        path: str | Path,
        trainable: Any,
        resume_unfinished: bool = True,
        resume_errored: bool = False,
        restart_errored: bool = False,
        param_space: dict | None = None,
    ) -> Tuner:
        path = Path(path).expanduser()
        if not cls.can_restore(path):
            raise ValueError(
                f"{path} holds no experiment to restore (no {TUNER_FILE} and experiment_state-*.json)"
            )
        saved = cloudpickle.loads((path / TUNER_FILE).read_bytes())
        run_config: RunConfig = saved["run_config"]
        run_config.storage_path = str(path.parent)
        run_config.name = path.name
        return cls(
            trainable,
            param_space=param_space if param_space is not None else saved["param_space"],
            tune_config=saved["tune_config"],
            run_config=run_config,
            _restored={
                "state": latest_state(path),
                "resume_unfinished": resume_unfinished,
                "resume_errored": resume_errored,
                "restart_errored": restart_errored,
            },
        )

    # --- run ------------------------------------------------------------------------------
    def fit(self) -> ResultGrid:
        tc, rc = self.tune_config, self.run_config
        # The settings as given, before the searcher and scheduler are set up for this run
        # (a searcher given the space here would refuse it again on restore).
        given = cloudpickle.dumps(tc)
        # Everything below is checked before any trial starts.
        scheduler = make_scheduler(tc.scheduler, tc)
        search = make_search(tc.search_alg, tc, self.param_space)
        stopper = as_stopper(rc.stop)
        resources = trainable_resources(self.trainable, self._default_resources)
        storage = Path(rc.storage_path or default_storage_path()).expanduser()
        name = rc.name or unused_name(storage, f"{self._name}_{date_str()}")
        experiment_dir = storage / name
        check_storage(experiment_dir)
        if not ember.is_initialized():
            ember.init()
        max_running = capacity(resources)
        if tc.max_concurrent_trials:
            max_running = min(max_running, tc.max_concurrent_trials)
        self._save_tuner(experiment_dir, given)
        loop = TrialLoop(
            search,
            scheduler,
            stopper,
            self._name,
            max_running,
            checkpoint_config=rc.checkpoint_config,
            max_failures=rc.failure_config.max_failures,
            is_function=self._is_function,
            time_budget_s=tc.time_budget_s,
            start_time=time.time(),
        )
        loop.initial_restore = self._initial_checkpoint
        session = None
        if self._restored:
            session = self._resume(loop, search, experiment_dir)
        reporter = []
        if rc.verbose != 0:
            shown = make_reporter(getattr(rc, "progress_reporter", None), rc.verbose)
            shown.set_search_properties(tc.metric, tc.mode)
            shown.sys_info = (scheduler.debug_string(), f"Result logdir: {experiment_dir}")
            reporter = [shown]
        controller = Controller(
            loop,
            self._cls,
            resources,
            experiment_dir,
            name,
            callbacks=default_callbacks(rc.callbacks, self._loggers) + reporter,
            session=session,
            reuse_actors=tc.reuse_actors,
            trial_name_creator=self._trial_name_creator,
        )
        server = None
        if self._server_port is not None:
            from ember.tune.web_server import TuneServer

            server = TuneServer(loop, self._server_port)
        try:
            controller.run()
        finally:
            if server is not None:
                server.shutdown()
        return ResultGrid(loop.trials, experiment_dir, tc.metric, tc.mode)

    def _save_tuner(self, experiment_dir: Path, tune_config: bytes) -> None:
        run_config = copy.copy(self.run_config)
        blob = cloudpickle.dumps(
            {
                "param_space": self.param_space,
                "tune_config": cloudpickle.loads(tune_config),
                "run_config": run_config,
                "trainable_name": self._name,
            }
        )
        write_atomic(experiment_dir / TUNER_FILE, blob)

    def _resume(self, loop: TrialLoop, search: SearchAlgorithm, experiment_dir: Path) -> str:
        """Loads the trials of the saved state: finished ones stay finished, unfinished ones
        go back to PENDING (from their latest checkpoint); the search skips what it made."""
        info = self._restored or {}
        state = info["state"]
        trials = [Trial.from_json(t) for t in state["trials"]]
        for trial in trials:
            if trial.status in (RUNNING, PAUSED, PENDING) and info["resume_unfinished"]:
                trial.status = PENDING
            elif trial.status == ERROR and (info["resume_errored"] or info["restart_errored"]):
                trial.status = PENDING
                trial.error_msg = None
                if info["restart_errored"]:
                    trial.latest_checkpoint = None
                    trial.checkpoint_iteration = 0
                    trial.checkpoint_time_total = 0.0
            trial.stop_requested = False
            loop.add_trial(trial)
        if isinstance(search, BasicVariantGenerator) and trials:
            search.prefix = trials[0].trial_id.rsplit("_", 1)[0] + "_"
        if search.restore_from_dir(experiment_dir):
            # The searcher is as it was when these trials were saved (Optuna's study,
            # HyperOpt's trials): it already knows what they were and how they ended.
            return state.get("session") or date_str()
        if isinstance(search, SearchGenerator):
            # No saved state (it could not be saved, or the driver died before the first
            # save): the searcher starts afresh and the saved trials count against
            # num_samples. Asking it again for them would leave suggestions no trial runs,
            # which a ConcurrencyLimiter would wait on forever.
            search.counter = len(trials)
            return state.get("session") or date_str()
        for _ in range(len(trials)):
            if search.next_trial() is None and search.finished:
                break
        for trial in trials:
            # The search hears of the restored trials' endings (a limit on live suggestions
            # must not count trials that finished before the kill).
            if trial.is_finished:
                search.on_trial_complete(
                    trial.trial_id, trial.last_result or None, trial.status == ERROR
                )
        return state.get("session") or date_str()
