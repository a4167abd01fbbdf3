"""The trial loop as a state machine: events in (a result, a saved checkpoint, a finished or
failed trial, the clock), actions out (start, train, save, stop, delete a checkpoint). No I/O
here: ``controller.py`` performs the actions, so every decision is testable as a table."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import ember.tune.checkpoint_manager as checkpoint_manager
from ember.tune.config import CheckpointConfig
from ember.tune.schedulers.trial_scheduler import TrialScheduler
from ember.tune.search.basic_variant import SearchAlgorithm
from ember.tune.stopper import Stopper
from ember.tune.trial import ERROR, PAUSED, PENDING, RUNNING, TERMINATED, Trial

MAX_PENDING = 64  # trials made ahead of a free slot (bounds memory with num_samples=-1)


@dataclass
class Action:
    kind: str  # start | train | save | stop | delete_checkpoint
    trial: Trial
    arg: Any = None  # stop: the final status; delete_checkpoint: the directory name


class TrialLoop:
    def __init__(
        self,
        search_alg: SearchAlgorithm,
        scheduler: TrialScheduler,
        stopper: Stopper,
        trainable_name: str,
        max_running: int,
        checkpoint_config: CheckpointConfig | None = None,
        max_failures: int = 0,
        is_function: bool = True,
        time_budget_s: float | None = None,
        start_time: float = 0.0,
    ) -> None:
        self.search_alg = search_alg
        self.scheduler = scheduler
        self.stopper = stopper
        self.trainable_name = trainable_name
        self.max_running = max(1, max_running)
        self.checkpoint_config = checkpoint_config or CheckpointConfig()
        self.max_failures = max_failures
        self.is_function = is_function
        self.time_budget_s = time_budget_s
        self.start_time = start_time
        self.trials: list[Trial] = []
        self.by_id: dict[str, Trial] = {}
        self.stopped = False  # the whole experiment (time budget, a stopper's stop_all)
        self._after_save: dict[str, Action] = {}
        self._queued: list[Action] = []  # stops a scheduler asked for other trials
        # tune.run(restore=...): (checkpoint directory, its iteration, its time) every new
        # trial starts from.
        self.initial_restore: tuple[str, int, float] | None = None

    # --- the view schedulers get ----------------------------------------------------------
    def live_trials(self) -> list[Trial]:
        return [t for t in self.trials if not t.is_finished]

    def stop_trial(self, trial: Trial) -> None:
        """A scheduler ends a trial other than the one reporting (HyperBand's halving)."""
        if trial.is_finished:
            return
        trial.stop_requested = True
        trial.status = TERMINATED
        self._after_save.pop(trial.trial_id, None)  # a pause's save no longer pauses it
        self.search_alg.on_trial_complete(trial.trial_id, trial.last_result or None, False)
        self._queued.append(Action("stop", trial, TERMINATED))

    def _drain(self, actions: list[Action]) -> list[Action]:
        queued, self._queued = self._queued, []
        return actions + queued

    def add_trial(self, trial: Trial) -> None:
        self.trials.append(trial)
        self.by_id[trial.trial_id] = trial
        if not trial.is_finished:
            self.scheduler.on_trial_add(self, trial)

    @property
    def running(self) -> list[Trial]:
        return [t for t in self.trials if t.status == RUNNING]

    @property
    def finished(self) -> bool:
        if self._after_save or any(t.status == RUNNING for t in self.trials):
            return False  # a save still to land (checkpoint_at_end) is part of its trial
        if self.stopped:
            return True
        waiting = any(t.status in (PENDING, PAUSED) for t in self.trials)
        return not waiting and self.search_alg.finished

    # --- events ---------------------------------------------------------------------------
    def step(self, now: float) -> list[Action]:
        """Called on every turn of the shell: the budget, new trials, free slots."""
        actions: list[Action] = []
        if not self.stopped and (
            (self.time_budget_s is not None and now - self.start_time >= self.time_budget_s)
            or self.stopper.stop_all()
        ):
            self.stopped = True
            for trial in self.running:
                actions += self._end(trial, TERMINATED)
        if self.stopped:
            return actions
        pending = sum(t.status == PENDING for t in self.trials)
        while pending < MAX_PENDING and not self.search_alg.finished:
            suggestion = self.search_alg.next_trial()
            if suggestion is None:
                break
            self.add_trial(
                Trial(
                    suggestion.trial_id,
                    suggestion.config,
                    suggestion.experiment_tag,
                    self.trainable_name,
                    evaluated_params=suggestion.evaluated_params,
                )
            )
            if self.initial_restore is not None:
                new = self.trials[-1]
                new.restore_path, new.restore_iteration, new.restore_time_total = (
                    self.initial_restore
                )
            pending += 1
        while len(self.running) < self.max_running:
            trial = self.scheduler.choose_trial_to_run(self)
            if trial is None:
                break
            trial.status = RUNNING
            trial.start_time = trial.start_time or now
            trial.stop_requested = False
            trial.runs += 1
            actions.append(Action("start", trial))
            actions.append(Action("train", trial))
        return self._drain(actions)

    def on_result(self, trial_id: str, result: dict) -> list[Action]:
        """A result arrived. ``result`` is updated in place (``done``) before it is written."""
        return self._drain(self._on_result(trial_id, result))

    def _on_result(self, trial_id: str, result: dict) -> list[Action]:
        trial = self.by_id[trial_id]
        if trial.status != RUNNING or trial.stop_requested:
            return []
        if result.get("__done__"):
            # The function returned: its last result is the final one (done in memory, as
            # in Ray; the line already written stays as it was).
            if trial.last_result:
                trial.last_result["done"] = True
            return self._end(trial, TERMINATED)
        trial.update_metrics(result)
        actions: list[Action] = []
        if result.get("checkpoint_dir_name"):
            actions += self._register_checkpoint(trial, result["checkpoint_dir_name"], result)
        # As Ray's controller: a result that ends the trial (its stop criteria, or done) is
        # not shown to the scheduler, which would otherwise act on a trial that is over (PBT
        # exploiting it gave a finished trial a config it never ran), nor to the searcher,
        # which hears of it as the trial's completion.
        if self.stopper(trial_id, result) or result.get("done"):
            decision = TrialScheduler.STOP
        else:
            decision = self.scheduler.on_trial_result(self, trial, result)
        if decision != TrialScheduler.STOP:
            self.search_alg.on_trial_result(trial_id, result)
        freq = self.checkpoint_config.checkpoint_frequency
        due = not self.is_function and bool(
            (freq and result.get("training_iteration", 0) % freq == 0)
            or result.get("should_checkpoint")
        )
        if decision == TrialScheduler.STOP:
            result["done"] = trial.last_result["done"] = True
            # A checkpoint due on the last result is taken too (as Ray's runner checks even
            # on STOP); checkpoint_at_end takes it anyway.
            return actions + self._end(trial, TERMINATED, result, save=due)
        if decision == TrialScheduler.PAUSE:
            return actions + self._pause(trial)
        asked = getattr(self.scheduler, "wants_checkpoint", None)
        wants_save = due or (not self.is_function and asked is not None and asked(trial))
        if wants_save:
            self._after_save[trial_id] = Action("train", trial)
            return actions + [Action("save", trial)]
        return actions + [Action("train", trial)]

    def awaits_save(self, trial_id: str) -> bool:
        """Whether a save of this trial is still to land before its next step."""
        return trial_id in self._after_save

    def on_saved(self, trial_id: str, name: str) -> list[Action]:
        trial = self.by_id[trial_id]
        actions: list[Action] = []
        if name:
            actions += self._register_checkpoint(trial, name, trial.last_result)
        follow = self._after_save.pop(trial_id, None)
        if follow is not None:
            if follow.kind == "stop" and follow.arg == PAUSED:
                trial.status = PAUSED  # only now: its actor and resources are released next
            actions.append(follow)
        return actions

    def on_error(self, trial_id: str, error_msg: str) -> list[Action]:
        return self._drain(self._on_error(trial_id, error_msg))

    def _on_error(self, trial_id: str, error_msg: str) -> list[Action]:
        trial = self.by_id[trial_id]
        if trial.is_finished:
            # Its last save failed: the stop waiting for that save still releases the actor.
            follow = self._after_save.pop(trial_id, None)
            return [follow] if follow is not None else []
        trial.num_failures += 1
        trial.error_msg = error_msg
        self._after_save.pop(trial_id, None)
        if not self.stopped and (
            self.max_failures == -1 or trial.num_failures <= self.max_failures
        ):
            # Restart from its latest checkpoint (or the start) when a slot is free.
            trial.status = PENDING
            return [Action("stop", trial, PENDING)]
        trial.status = ERROR
        self.scheduler.on_trial_error(self, trial)
        self.search_alg.on_trial_complete(trial_id, trial.last_result or None, True)
        return [Action("stop", trial, ERROR)]

    # --- helpers --------------------------------------------------------------------------
    def _register_checkpoint(self, trial: Trial, name: str, result: dict) -> list[Action]:
        trial.latest_checkpoint = name
        trial.checkpoint_iteration = result.get("training_iteration", 0)
        trial.checkpoint_time_total = result.get("time_total_s", 0.0)
        trial.checkpoint_points[name] = [trial.checkpoint_iteration, trial.checkpoint_time_total]
        trial.checkpoints, drop = checkpoint_manager.register(
            trial.checkpoints, name, result, self.checkpoint_config
        )
        for gone in drop:
            trial.checkpoint_points.pop(gone, None)
        return [Action("delete_checkpoint", trial, d) for d in drop]

    def _end(
        self, trial: Trial, status: str, result: dict | None = None, save: bool = False
    ) -> list[Action]:
        trial.stop_requested = True
        stop = Action("stop", trial, status)
        trial.status = status
        if status == TERMINATED:
            final = result if result is not None else trial.last_result
            self.scheduler.on_trial_complete(self, trial, final)
            self.search_alg.on_trial_complete(trial.trial_id, final or None, False)
        if not self.is_function and (self.checkpoint_config.checkpoint_at_end or save):
            self._after_save[trial.trial_id] = stop
            return [Action("save", trial)]
        # A pause's save still on its way (the time budget ran out meanwhile) ends with it.
        self._after_save.pop(trial.trial_id, None)
        return [stop]

    def _pause(self, trial: Trial) -> list[Action]:
        trial.stop_requested = True
        stop = Action("stop", trial, PAUSED)
        if self.is_function:
            trial.status = PAUSED
            return [stop]  # resumes from its last reported checkpoint
        # RUNNING until its checkpoint lands (on_saved): a PAUSED trial may be started again
        # at once, and this one still has its actor and its save in flight.
        self._after_save[trial.trial_id] = stop
        return [Action("save", trial)]
