"""The I/O shell around ``TrialLoop``: trials as Ember actors in placement groups, results
gathered with ``ember.wait``, files and the experiment's state written as they happen."""

from __future__ import annotations

import sys
import time
import traceback
from pathlib import Path
from typing import Any

import ember
from ember.tune.callback import Callback
from ember.tune.checkpoint import Checkpoint
from ember.tune.files import TrialFiles, date_str, trial_dirname, write_pbt_policy, write_state
from ember.tune.loop import Action, TrialLoop
from ember.tune.publish import install as install_publisher
from ember.tune.resources import PlacementGroupFactory
from ember.tune.trainable.session import TrialContext
from ember.tune.trial import ERROR, PAUSED, PENDING, TERMINATED, Trial
from ember.tune.trial_actor import TuneTrial
from ember.util.placement_group import placement_group, remove_placement_group
from ember.util.scheduling_strategies import PlacementGroupSchedulingStrategy

WAIT_S = 0.2  # one turn of the loop at most: the clock (time budget) is checked this often
STOP_WAIT_S = 5.0  # how long a stopping trial's cleanup() may take before its actor is killed
STATE_EVERY_S = 2.0  # results alone rewrite the state file at most this often
# Starts and stops rewrite it at most this often: each write holds every trial, so one per
# start and stop made 1,000 trials quadratic (450 s, most of it writing the state).
STATE_AFTER_CHANGE_S = 0.5
# A function trainable's results taken per round trip when the scheduler decides nothing
# the function must wait for between results (it may run this many results ahead; what it
# reported past a stop is dropped, never written).
RESULTS_PER_CALL = 64


def buffers_results(loop: TrialLoop, trainable_cls: type) -> bool:
    """Whether the loop may take a function trainable's results many at a time: its
    scheduler only continues or stops trials on a result (FIFO, ASHA, median stopping),
    never pauses one or asks it to save in between (PBT, HyperBand)."""
    from ember.tune.schedulers.async_hyperband import AsyncHyperBandScheduler
    from ember.tune.schedulers.median_stopping import MedianStoppingRule
    from ember.tune.schedulers.trial_scheduler import FIFOScheduler

    if getattr(trainable_cls, "_function", None) is None:
        return False
    return type(loop.scheduler) in (FIFOScheduler, AsyncHyperBandScheduler, MedianStoppingRule)


def capacity(resources: PlacementGroupFactory) -> int:
    """How many trials of this size the cluster holds at once; a trial larger than the whole
    cluster is an error now, not a hang."""
    total = ember.cluster_resources()
    need = resources.required_resources()
    fits = []
    for name, amount in need.items():
        have = total.get(name, 0.0)
        if have < amount:
            raise ValueError(
                f"each trial needs {need}, but the cluster has only {have:g} {name} "
                f"(in all: { {k: v for k, v in total.items() if not k.startswith('node:')} }); "
                "lower resources_per_trial / tune.with_resources"
            )
        if amount > 0:
            fits.append(int(have // amount))
    return max(1, min(fits) if fits else 1)


def error_text(error: BaseException) -> str:
    return "".join(traceback.format_exception(error)).rstrip()


class Controller:
    def __init__(
        self,
        loop: TrialLoop,
        trainable_cls: type,
        resources: PlacementGroupFactory,
        experiment_dir: Path,
        experiment_name: str,
        callbacks: list[Callback] | None = None,
        session: str | None = None,
        state_extra: dict | None = None,
        reuse_actors: bool = False,
        trial_name_creator: Any = None,
    ) -> None:
        self.loop = loop
        self.trainable_cls = trainable_cls
        self.resources = resources
        self.dir = experiment_dir
        self.name = experiment_name
        self.callbacks = list(callbacks or [])
        self.callbacks += install_publisher(self)  # the dashboard's Tune view (publish.py)
        self.session = session or date_str()
        self.state_extra = state_extra or {}
        self.files: dict[str, TrialFiles] = {}
        self.actors: dict[str, tuple[Any, Any]] = {}
        self.refs: dict[Any, tuple[str, int, str]] = {}
        self.iteration = 0
        # reuse_actors: actors (with their placement groups) of ended trials, kept for the
        # next trial to start instead of a new actor (same resources: every trial's are).
        self.reuse_actors = reuse_actors
        self.idle: list[tuple[Any, Any]] = []
        self._state_written = 0.0
        self._state_changed = False  # a trial started or stopped since the last write
        self._actor_cls = ember.remote(TuneTrial)
        self.buffered = buffers_results(loop, trainable_cls)
        self.trial_name_creator = trial_name_creator
        # trial id -> how many of its perturbations are logged (a restore's are already)
        self.pbt_logged = {t.trial_id: len(t.perturbations) for t in loop.trials}
        self.pbt_seen = getattr(loop.scheduler, "num_perturbations", 0)

    # --- the loop -------------------------------------------------------------------------
    def run(self) -> None:
        for cb in self.callbacks:
            cb.setup(stop=None, num_samples=None, total_num_samples=None)
        try:
            self._run()
        finally:
            for trial_id in list(self.actors):
                self._release(trial_id, graceful=False)
            for actor, pg in self.idle:
                ember.wait([actor.stop.remote()], timeout=STOP_WAIT_S)  # its cleanup() runs
                self._end_actor(actor, pg)
            self.idle.clear()
            for files in self.files.values():
                files.flush()
            self.write_state()
            for cb in self.callbacks:
                cb.on_experiment_end(trials=self.loop.trials)

    def _run(self) -> None:
        self.write_state()
        while True:
            self.iteration += 1
            self._perform(self.loop.step(time.time()))
            if self.loop.finished:
                return
            if not self.refs:
                time.sleep(0.05)  # a searcher with nothing to suggest yet
                continue
            ready, _ = ember.wait(list(self.refs), num_returns=1, timeout=WAIT_S)
            for ref in ready:
                self._arrived(ref)
            for cb in self.callbacks:
                cb.on_step_end(self.iteration, self.loop.trials)
            since = time.time() - self._state_written
            if since > STATE_EVERY_S or (self._state_changed and since > STATE_AFTER_CHANGE_S):
                self.write_state()

    def _arrived(self, ref: Any) -> None:
        trial_id, run, kind = self.refs.pop(ref)
        try:
            self._answer(trial_id, run, kind, ref)
        finally:
            files = self.files.get(trial_id)
            if files is not None:
                files.flush()  # the batch's results, in one write per file

    def _answer(self, trial_id: str, run: int, kind: str, ref: Any) -> None:
        trial = self.loop.by_id[trial_id]
        if run != trial.runs:
            return  # the answer of an actor this trial no longer has
        try:
            value = ember.get(ref)
        except Exception as e:  # noqa: BLE001 - the trial's error, reported on the trial
            if trial.is_finished and not self.loop.awaits_save(trial_id):
                return  # a save cut short by its trial's end (a scheduler stopped it)
            self._failed(trial, e)
            return
        if kind == "save":
            self._perform(self.loop.on_saved(trial_id, value))
            if value:
                for cb in self.callbacks:
                    cb.on_checkpoint(
                        self.iteration,
                        self.loop.trials,
                        trial,
                        Checkpoint(self.files[trial_id].dir / value),
                    )
            return
        if kind == "train":
            self._perform(self._result(trial, value))
            return
        # Many results: each as if it came alone, the next train call once at the end; a
        # decision to stop the trial drops the results after it (reported past the stop).
        actions: list[Action] = []
        for result in value:
            actions = self._result(trial, result)
            again = [a for a in actions if a.kind == "train" and a.trial is trial]
            if not again:
                break
            self._perform([a for a in actions if not any(a is b for b in again)])
            actions = again
        self._perform(actions)

    def _result(self, trial: Trial, value: dict) -> list[Action]:
        actions = self.loop.on_result(trial.trial_id, value)
        perturbed = getattr(self.loop.scheduler, "num_perturbations", 0)
        if perturbed != self.pbt_seen:
            # Logged when they happen, as Ray does: a trial exploited at its last result
            # never starts again, and its policy file was never written.
            self.pbt_seen = perturbed
            for t in self.loop.trials:
                self._log_perturbations(t)
        if not value.get("__done__"):
            self.files[trial.trial_id].write_result(value)
            for cb in self.callbacks:
                cb.on_trial_result(self.iteration, self.loop.trials, trial, value)
        return actions

    def _failed(self, trial: Trial, error: BaseException) -> None:
        text = error_text(error)
        self.files[trial.trial_id].write_error(trial.num_failures + 1, text, error)
        actions = self.loop.on_error(trial.trial_id, text)
        if trial.status == ERROR:
            for cb in self.callbacks:
                cb.on_trial_error(self.iteration, self.loop.trials, trial)
        self._perform(actions)

    # --- actions --------------------------------------------------------------------------
    def _perform(self, actions: list[Action]) -> None:
        for action in actions:
            getattr(self, f"_do_{action.kind}")(action)

    def _do_start(self, action: Action) -> None:
        trial = action.trial
        if trial.trial_id in self.actors:  # never two actors for one trial (nor a leaked one)
            self._release(trial.trial_id, graceful=False)
        if self.trial_name_creator is not None and trial.custom_name is None:
            trial.custom_name = str(self.trial_name_creator(trial))
        if not trial.dirname:
            trial.dirname = trial_dirname(trial)
        trial.experiment_dir = str(self.dir)
        self._log_perturbations(trial)
        files = self.files.get(trial.trial_id) or TrialFiles(self.dir / trial.dirname)
        self.files[trial.trial_id] = files
        if not (files.dir / "params.json").exists():
            files.write_params(trial.config)
        restore = None
        donor, trial.restore_path = trial.restore_path, None
        if donor and Path(donor).is_dir():
            restore = {
                "path": donor,
                "iteration": trial.restore_iteration,
                "time_total": trial.restore_time_total,
            }
        elif trial.latest_checkpoint and not (files.dir / trial.latest_checkpoint).is_dir():
            # Deleted under the experiment: said, and the trial starts over (never a hang).
            print(
                f"ember.tune: trial {trial.trial_name}'s checkpoint "
                f"{files.dir / trial.latest_checkpoint} is gone; it restarts from the beginning",
                file=sys.stderr,
                flush=True,
            )
            trial.latest_checkpoint = None
        elif trial.latest_checkpoint:
            restore = {
                "path": str(files.dir / trial.latest_checkpoint),
                "iteration": trial.checkpoint_iteration,
                "time_total": trial.checkpoint_time_total,
            }
        context = TrialContext(
            trial.trial_id, trial.trial_name, self.name, str(files.dir), self.resources
        )
        while self.idle:
            actor, pg = self.idle.pop()
            try:
                taken = ember.get(
                    actor.reset.remote(self.trainable_cls, trial.config, context, restore),
                    timeout=STOP_WAIT_S,
                )
            except Exception:  # noqa: BLE001 - it died idle: a new actor instead
                taken = False
            if taken:
                self._started(trial, actor, pg)
                return
            self._end_actor(actor, pg)
        bundles = self.resources.bundles
        pg = placement_group(bundles, strategy=self.resources.strategy)
        head = dict(bundles[0])
        cpus, gpus = head.pop("CPU", 0.0), head.pop("GPU", 0.0)
        memory = head.pop("memory", None)
        suffix = f"/run{trial.runs}" if trial.runs > 1 else ""
        options: dict[str, Any] = {
            # `ember list actors` shows which trial of which experiment an actor runs.
            "name": f"tune/{self.name}/{trial.trial_name}{suffix}",
            "num_cpus": cpus,
            "num_gpus": gpus,
            "max_concurrency": 2,  # stop() may come while train() waits on the function
            "scheduling_strategy": PlacementGroupSchedulingStrategy(pg, 0),
        }
        if head:
            options["resources"] = head
        if memory:
            options["memory"] = memory
        actor = self._actor_cls.options(**options).remote(
            self.trainable_cls, trial.config, context, restore
        )
        self._started(trial, actor, pg)

    def _log_perturbations(self, trial: Trial) -> None:
        """PBT's exploits of this trial not yet in pbt_global.txt / pbt_policy_<id>.txt."""
        if not getattr(self.loop.scheduler, "log_config", False):
            return
        done = self.pbt_logged.get(trial.trial_id, 0)
        for perturbation in trial.perturbations[done:]:
            donor = self.loop.by_id.get(perturbation["clone_from"])
            if donor is not None:
                write_pbt_policy(self.dir, trial, donor, perturbation)
        self.pbt_logged[trial.trial_id] = len(trial.perturbations)

    def _started(self, trial: Trial, actor: Any, pg: Any) -> None:
        self.actors[trial.trial_id] = (actor, pg)
        self._state_changed = True
        for cb in self.callbacks:
            cb.on_trial_start(self.iteration, self.loop.trials, trial)

    def _do_train(self, action: Action) -> None:
        if self.buffered:
            self._call(action.trial, "train_buffered", RESULTS_PER_CALL)
        else:
            self._call(action.trial, "train")

    def _do_save(self, action: Action) -> None:
        self._call(action.trial, "save")

    def _call(self, trial: Trial, method: str, *args: Any) -> None:
        actor, _ = self.actors[trial.trial_id]
        ref = getattr(actor, method).remote(*args)
        self.refs[ref] = (trial.trial_id, trial.runs, method)

    def _do_stop(self, action: Action) -> None:
        trial = action.trial
        status = action.arg
        # A finished trial's actor waits for the next trial when actors are reused, as long
        # as trials are still to come (else it is ended with the experiment).
        keep = self.reuse_actors and status == TERMINATED and not self.loop.finished
        self._release(trial.trial_id, graceful=status in (TERMINATED, PAUSED), keep=keep)
        self._state_changed = True
        if status == TERMINATED:
            for cb in self.callbacks:
                cb.on_trial_complete(self.iteration, self.loop.trials, trial)
        if status == PENDING:
            trial.stop_requested = False

    def _do_delete_checkpoint(self, action: Action) -> None:
        self.files[action.trial.trial_id].delete_checkpoint(action.arg)

    def _release(self, trial_id: str, graceful: bool, keep: bool = False) -> None:
        actor, pg = self.actors.pop(trial_id, (None, None))
        for ref in [r for r, v in self.refs.items() if v[0] == trial_id and v[2] != "save"]:
            self.refs.pop(ref)
        if actor is None:
            return
        if keep:
            self.idle.append((actor, pg))  # reset (not stopped) for the next trial
            return
        if graceful:
            # cleanup() runs; an actor that does not answer in time is killed anyway.
            ember.wait([actor.stop.remote()], timeout=STOP_WAIT_S)
        self._end_actor(actor, pg)

    def _end_actor(self, actor: Any, pg: Any) -> None:
        try:
            ember.kill(actor)
        except Exception:  # noqa: BLE001 - already gone (it failed): nothing to end
            pass
        try:
            remove_placement_group(pg)
        except Exception:  # noqa: BLE001 - the group went with its node
            pass

    # --- durable state --------------------------------------------------------------------
    def write_state(self) -> None:
        state = {
            "name": self.name,
            "session": self.session,
            "stopped": self.loop.stopped,
            "trials": [t.to_json() for t in self.loop.trials],
            **self.state_extra,
        }
        write_state(self.dir, self.session, state)
        self.loop.search_alg.save_to_dir(self.dir)  # the same moment as the trials'
        self._state_written = time.time()
        self._state_changed = False
