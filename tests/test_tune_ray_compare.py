"""Tune side by side: ``tests/tools/ray_tune_programs.py`` runs one set of Tune programs
(function and class trainables, grid and seeded random search, sample_from, ASHA, stoppers,
checkpoints kept by num_to_keep, a failing trial, a trial whose worker is SIGKILLed, tune.run
and its ExperimentAnalysis, the ``train`` spellings, Optuna's and HyperOpt's space conversions,
bad input) on Ray Tune 2.60 (its own environment, ``tests/tools/.ray-venv``) and on ember.tune;
what a user reads must agree: trial counts and statuses, configs, metrics, result keys in
order, progress.csv headers, the files of each trial, the trial directory names, dataframe
columns, the errors, and what TensorBoard's own reader finds in each trial's event files.

Without Ray's environment (with ``ray[tune]``) the test skips, except in CI where it fails.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from ember_test_utils import require_ray_python, run_compare_program

ROOT = Path(__file__).resolve().parents[1]
PROGRAM = ROOT / "tests" / "tools" / "ray_tune_programs.py"

# Where Ember means to differ, Ember's answer (checked); each entry says why.
EMBER_OWN = {
    # Ember names the bad path and the fix; Ray 2.60 also fails before any trial starts.
    "unwritable_storage": ["ValueError"],
    # The experiment's own files: Ember's state file (its own JSON format, rewritten
    # atomically as the experiment runs) and tuner.pkl; Ray also writes
    # basic-variant-state-*.json (a BasicVariantGenerator is rebuilt from tuner.pkl here).
    "experiment_files": [".validate_storage_marker", "experiment_state-DATE.json", "tuner.pkl"],
    # A SIGKILLed trial's rows from before its restore (in order: killed once, killed twice):
    # Ember keeps them in result.json; Ray 2.60 copies the file over itself on restore and
    # sometimes loses them.
    "sigkilled_rows_before_restore": [[[0, 0, 1], [1, 0, 2]], [[0, 0, 1], [1, 0, 2]]],
    # A mode that is neither 'min' nor 'max' is refused when the TuneConfig is made; Ray
    # 2.60 takes TuneConfig(mode="maximum") and fails later.
    "mode_typo": ["ValueError"],
    # Ray 2.60 refuses ray.train.report inside a Tune trial (DeprecationWarning raised; the
    # trial ERRORs); Ember runs the ray.train spellings of earlier Ray 2.x programs.
    "train_spellings": {
        "statuses": ["TERMINATED", "TERMINATED"],
        "errors": [None, None],
        "scores": [1, 2],
        "context": [[True, "train", True, 1, 0, 0], [True, "train", True, 1, 0, 0]],
        "checkpoints": ["checkpoint_000000", "checkpoint_000000"],
        "is_train_result": True,
    },
}


def _ray_has_tune(ray_python: Path) -> bool:
    probe = subprocess.run([str(ray_python), "-c", "import ray.tune"], capture_output=True)
    return probe.returncode == 0


@pytest.mark.timeout(1200)
def test_ray_tune_and_ember_tune_agree():
    ray_python = require_ray_python()
    if not _ray_has_tune(ray_python):
        pytest.skip("Ray's environment lacks ray[tune]; run scripts/dev.sh setup")
    started = time.monotonic()
    ember = run_compare_program(PROGRAM, sys.executable, "ember")
    ember_seconds = time.monotonic() - started
    # Ray Tune starts each trial slowly (seconds each on a loaded 2-core machine): more time.
    ray = run_compare_program(PROGRAM, ray_python, "ray", timeout=800)
    print(f"wall time: Ember {ember_seconds:.1f} s, both {time.monotonic() - started:.1f} s")
    print("per case (s): Ember", ember["seconds"], "Ray", ray["seconds"])
    differ = {
        case: (ember["same"].get(case), ray["same"].get(case))
        for case in ember["same"] | ray["same"]
        if ember["same"].get(case) != ray["same"].get(case)
    }
    assert not differ, f"Ember and Ray differ (ember, ray): {differ}"
    assert ember["own"] == EMBER_OWN
    print("Ray's own answers:", ray["own"])
