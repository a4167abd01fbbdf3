"""What an experiment writes, in Ray Tune 2.60's shapes: per trial ``params.json``,
``params.pkl``, ``result.json`` (a JSON line per result), ``progress.csv``, ``error.txt`` and
``error.pkl``; per experiment its state file, rewritten atomically as it runs."""

from __future__ import annotations

import csv
import datetime
import json
import os
import pickle
import re
import shutil
from pathlib import Path
from typing import Any

import cloudpickle
from ember.tune.trial import Trial

MAX_NAME_LEN = 130  # Ray's TUNE_MAX_LEN_IDENTIFIER: the tag part of a trial's directory
STATE_PREFIX = "experiment_state-"
CHECKPOINT_NAME = re.compile(r"checkpoint_\d{6}")


def date_str() -> str:
    return datetime.datetime.today().strftime("%Y-%m-%d_%H-%M-%S")


def _default(value: Any) -> Any:
    # What JSON cannot hold is written as its repr (as Ray's SafeFallbackEncoder does).
    try:
        import numpy as np

        if isinstance(value, np.integer):
            return int(value)
        if isinstance(value, np.floating):
            return float(value)
        if isinstance(value, np.ndarray):
            return value.tolist()
    except ImportError:
        pass
    return repr(value) if not isinstance(value, type) else value.__name__


def to_json(value: Any, **kwargs: Any) -> str:
    return json.dumps(value, default=_default, **kwargs)


def trial_dirname(trial: Trial) -> str:
    if trial.custom_name is not None:  # named by trial_name_creator: that name, as in Ray 0.8
        return f"{trial.custom_name[:MAX_NAME_LEN]}_{date_str()}".replace("/", "_")
    name = f"{trial}_{trial.experiment_tag}"[:MAX_NAME_LEN] + f"_{date_str()}"
    return name.replace("/", "_")


def unused_name(storage: Path, name: str) -> str:
    """A default experiment name no other run has taken: two runs started within the same
    second would otherwise share one directory, and the second's state would replace the
    first's (its trials, their checkpoints' iterations, what ``restore=`` reads)."""
    candidate, n = name, 1
    while True:
        try:
            (storage / candidate).mkdir(parents=True)
            return candidate
        except FileExistsError:
            n += 1
            candidate = f"{name}_{n}"
        except OSError:
            return candidate  # check_storage names what is wrong with the storage path


def check_storage(path: Path) -> None:
    """Fails, naming the path, when the experiment cannot write there (before any trial)."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".validate_storage_marker"
        probe.write_text("")
    except OSError as e:
        raise ValueError(
            f"storage_path {path.parent} is not writable ({e.strerror}); pass a directory "
            "you can write to as RunConfig(storage_path=...) or set EMBER_RESULTS_DIR"
        ) from e


def flatten(result: dict, prefix: str = "") -> dict:
    out: dict = {}
    for key, value in result.items():
        if isinstance(value, dict):
            out.update(flatten(value, f"{prefix}{key}/"))
        else:
            out[f"{prefix}{key}"] = value
    return out


class TrialFiles:
    """Appends one trial's results; the CSV header is the first result's keys (later keys
    are left out of the CSV, as in Ray, and kept in result.json). Results are held until
    ``flush``, which the controller calls once per batch it receives from the trial: one
    open and one write per file per batch instead of per result (a trial reporting
    hundreds of results a second sends them in batches)."""

    def __init__(self, trial_dir: Path) -> None:
        self.dir = trial_dir
        self.fields: list[str] | None = None
        self._header = False  # the CSV's header is still to be written
        self._lines: list[str] = []
        self._rows: list[dict] = []
        csv_path = trial_dir / "progress.csv"
        if csv_path.exists() and csv_path.stat().st_size:
            with open(csv_path, newline="") as f:
                self.fields = next(csv.reader(f), None)

    def write_params(self, config: dict) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "params.json").write_text(to_json(config, indent=2, sort_keys=True))
        (self.dir / "params.pkl").write_bytes(cloudpickle.dumps(config))

    def write_result(self, result: dict) -> None:
        self._lines.append(to_json(result) + "\n")
        row = flatten({k: v for k, v in result.items() if k != "config"})
        if self.fields is None:
            self.fields, self._header = list(row), True
        self._rows.append(row)

    def flush(self) -> None:
        """Writes the results held since the last flush."""
        if self._lines:
            with open(self.dir / "result.json", "a") as f:
                f.write("".join(self._lines))
            self._lines.clear()
        if self._rows:
            with open(self.dir / "progress.csv", "a", newline="") as f:
                writer = csv.DictWriter(f, fieldnames=self.fields, extrasaction="ignore")
                if self._header:
                    writer.writeheader()
                    self._header = False
                writer.writerows(self._rows)
            self._rows.clear()

    def write_error(self, failure: int, text: str, error: BaseException | None) -> None:
        self.flush()
        with open(self.dir / "error.txt", "a") as f:
            f.write(f"Failure # {failure} (occurred at {date_str()})\n{text}\n")
        try:
            blob = cloudpickle.dumps(error)
        except Exception:  # noqa: BLE001 - an unpicklable error keeps its text only
            blob = pickle.dumps(RuntimeError(text))
        (self.dir / "error.pkl").write_bytes(blob)

    def delete_checkpoint(self, name: str) -> None:
        # Only the trial's own checkpoint_NNNNNN directories, never a path from elsewhere.
        if CHECKPOINT_NAME.fullmatch(name):
            shutil.rmtree(self.dir / name, ignore_errors=True)


def write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(path)  # a SIGKILL leaves the old state or the new, never half of one


def write_state(experiment_dir: Path, session: str, state: dict) -> None:
    write_atomic(experiment_dir / f"{STATE_PREFIX}{session}.json", to_json(state).encode())


def latest_state(experiment_dir: Path) -> dict | None:
    files = sorted(experiment_dir.glob(f"{STATE_PREFIX}*.json"))
    if not files:
        return None
    return json.loads(files[-1].read_text())


def write_pbt_policy(experiment_dir: Path, trial: Trial, donor: Trial, perturbation: dict) -> None:
    """Ray's PBT log of one exploit: a line ``[target tag, clone tag, target iteration, clone
    iteration, clone config, new config]`` in ``pbt_global.txt``, and the target's own
    ``pbt_policy_<id>.txt`` becomes the clone's history plus that line."""
    policy = [
        trial.experiment_tag,
        donor.experiment_tag,
        trial.last_result.get("training_iteration", 0),
        perturbation.get("clone_iteration", 0),
        donor.config,
        perturbation["new_config"],
    ]
    line = to_json(policy) + "\n"
    with open(experiment_dir / "pbt_global.txt", "a") as f:
        f.write(line)
    mine = experiment_dir / f"pbt_policy_{trial.trial_id}.txt"
    theirs = experiment_dir / f"pbt_policy_{donor.trial_id}.txt"
    history = theirs.read_text() if theirs.exists() else ""
    mine.write_text(history + line)
