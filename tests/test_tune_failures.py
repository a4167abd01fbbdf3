"""Trials whose worker process is SIGKILLed from outside: with FailureConfig(max_failures) each
restarts from its latest checkpoint; past the limit it ends ERROR with the actor's death as its
error; a checkpoint deleted under the experiment is reported and the trial starts over (never a
hang). One local node (4 CPUs) for the module."""

from __future__ import annotations

import json
import os
import signal
import tempfile
import threading
import time
from pathlib import Path

import ember
import pytest
from ember import tune
from ember.exceptions import ActorDiedError


@pytest.fixture(scope="module")
def node(_module_node_cleanup):
    if ember.is_initialized():
        ember.shutdown()
    return ember.init(num_cpus=4)


def killable(config):
    """Reports a checkpoint per step; on its second step of a run it parks until the test kills
    its process, as long as it has kills left (``config["kills"]``)."""
    scratch = Path(config["scratch"])
    trial_id = tune.get_context().get_trial_id()
    start = 0
    checkpoint = tune.get_checkpoint()
    if checkpoint:
        with checkpoint.as_directory() as d:
            start = json.loads(Path(d, "state.json").read_text())["i"] + 1
    for i in range(start, 4):
        with tempfile.TemporaryDirectory() as d:
            Path(d, "state.json").write_text(json.dumps({"i": i}))
            tune.report({"i": i, "resumed_at": start}, checkpoint=tune.Checkpoint.from_directory(d))
        runs = len(list(scratch.glob(f"{trial_id}.*")))
        if i == start + 1 and runs < config["kills"]:
            Path(scratch, f"{trial_id}.{runs}.pid").write_text(str(os.getpid()))
            time.sleep(120)  # SIGKILLed here by the test


class Killer(threading.Thread):
    """SIGKILLs each process that leaves a pid file, once; first deletes the checkpoints of
    trials the test names (a checkpoint gone under a running experiment)."""

    def __init__(self, scratch: Path, experiment: Path, delete_for: set[int]) -> None:
        super().__init__(daemon=True)
        self.scratch, self.experiment, self.delete_for = scratch, experiment, delete_for
        self.done = threading.Event()
        self.killed: list[str] = []

    def run(self) -> None:
        deadline = time.monotonic() + 120
        while not self.done.is_set() and time.monotonic() < deadline:
            for pid_file in self.scratch.glob("*.pid"):
                text = pid_file.read_text()
                if not text:
                    continue  # being written: the next turn reads it
                trial_id = pid_file.name.split(".")[0]
                if int(trial_id.rsplit("_", 1)[1]) in self.delete_for:
                    for trial_dir in self.experiment.glob(f"*{trial_id}*"):
                        for ck in trial_dir.glob("checkpoint_*"):
                            for f in ck.iterdir():
                                f.unlink()
                            ck.rmdir()
                os.kill(int(text), signal.SIGKILL)
                pid_file.rename(pid_file.with_suffix(".killed"))
                self.killed.append(trial_id)
            time.sleep(0.05)


class Ends(tune.Callback):
    def __init__(self):
        self.failures: dict[str, tuple[str, int]] = {}

    def on_trial_complete(self, iteration, trials, trial, **info):
        self.failures[trial.trial_id] = ("TERMINATED", trial.num_failures)

    def on_trial_error(self, iteration, trials, trial, **info):
        self.failures[trial.trial_id] = ("ERROR", trial.num_failures)


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_sigkilled_workers_restart_from_their_latest_checkpoint(node, tmp_path, capsys):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    ends = Ends()
    # Trial 0 is killed once, trial 1 twice (one more than max_failures), trial 2 once after
    # its checkpoints were deleted.
    killer = Killer(scratch, tmp_path / "killed", delete_for={2})
    killer.start()
    try:
        grid = tune.Tuner(
            killable,
            param_space={"scratch": str(scratch), "kills": tune.grid_search([1, 2, 1])},
            tune_config=tune.TuneConfig(
                search_alg=tune.search.BasicVariantGenerator(random_state=1)
            ),
            run_config=tune.RunConfig(
                name="killed",
                storage_path=str(tmp_path),
                verbose=0,
                callbacks=[ends],
                failure_config=tune.FailureConfig(max_failures=1),
            ),
        ).fit()
    finally:
        killer.done.set()
        killer.join()
    survivor, errored, forgotten = grid
    assert sorted(killer.killed) == sorted(
        [survivor.trial_id, errored.trial_id, errored.trial_id, forgotten.trial_id]
    )

    # Killed after its checkpoint at i=1: the restart goes on from i=2, not from the start.
    rows = lines(Path(survivor.path) / "result.json")
    assert [(r["i"], r["resumed_at"], r["training_iteration"]) for r in rows] == [
        (0, 0, 1),
        (1, 0, 2),
        (2, 2, 3),
        (3, 2, 4),
    ]
    assert survivor.status == "TERMINATED" and survivor.error is None
    assert ends.failures[survivor.trial_id] == ("TERMINATED", 1)
    failure = Path(survivor.path, "error.txt").read_text()
    assert failure.startswith("Failure # 1 (occurred at ") and "ActorDiedError" in failure

    # Killed twice with max_failures=1: ERROR, the actor's death as its error.
    assert errored.status == "ERROR" and ends.failures[errored.trial_id] == ("ERROR", 2)
    assert isinstance(errored.error, ActorDiedError)
    assert errored.metrics["i"] == 3 and grid.num_errors == 1 and grid.num_terminated == 2
    text = Path(errored.path, "error.txt").read_text()
    assert "Failure # 1 (occurred at " in text and "Failure # 2 (occurred at " in text

    # Its checkpoints deleted before the kill: said on stderr, and it starts over.
    rows = lines(Path(forgotten.path) / "result.json")
    assert [(r["i"], r["resumed_at"]) for r in rows] == [
        (0, 0),
        (1, 0),
        (0, 0),
        (1, 0),
        (2, 0),
        (3, 0),
    ]
    assert forgotten.status == "TERMINATED"
    err = capsys.readouterr().err
    assert f"trial killable_{forgotten.trial_id}'s checkpoint " in err
    assert "is gone; it restarts from the beginning" in err
