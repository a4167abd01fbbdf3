"""Ray's libraries side by side: ``tests/tools/ray_util_programs.py`` runs the same program
of queue, multiprocessing Pool and joblib cases on Ray 2.60 (its own environment,
``tests/tools/.ray-venv``) and on Ember, and the outcomes must agree.

Where Ember means to differ (``own``), Ember's answer is checked against the standard
library's semantics; Ray's is only printed: those are Ray's bugs, not a contract.
Without Ray's environment the test skips, except in CI where it fails naming the command.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from ember_test_utils import require_ray_python, run_compare_programs_together

ROOT = Path(__file__).resolve().parents[1]
PROGRAM = ROOT / "tests" / "tools" / "ray_util_programs.py"
NO_JOBLIB = "joblib is not installed"

# Ember's answers where it differs from Ray on purpose (see the program's comments).
EMBER_OWN = {
    "queue": {"get_timeout_zero_with_an_item": ["ok", "there"]},
    "pool": {
        "returned_exception": ["ok", "KeyError"],
        "error_callback_gets": ["ValueError"],
        "callback_order": [[x * x for x in range(8)]],
    },
    "joblib": {"generator": ["ok", [0, 1, 4]]},
}


@pytest.mark.timeout(600)
def test_ray_and_ember_agree_on_queue_pool_and_joblib():
    ray_python = require_ray_python()
    # No case measures speed: both runtimes run at once.
    ember, ray = run_compare_programs_together(PROGRAM, ray_python)

    if ray["same"]["joblib"] == NO_JOBLIB:  # Ray's environment lacks joblib: compare the rest
        print("Ray's environment has no joblib: the joblib cases ran on Ember only")
        ray["same"]["joblib"] = ember["same"]["joblib"]
    for library in ("queue", "pool", "joblib"):
        mine, theirs = ember["same"][library], ray["same"][library]
        differ = {
            k: (mine.get(k), theirs.get(k)) for k in mine | theirs if mine.get(k) != theirs.get(k)
        }
        assert not differ, f"{library}: Ember and Ray differ (ember, ray): {differ}"

    for library, cases in EMBER_OWN.items():
        assert ember["own"][library] == cases, library
        print(library, "Ray's own answers:", ray["own"][library])
