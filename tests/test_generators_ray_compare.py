"""Generators side by side: ``tests/tools/ray_generator_programs.py`` runs the same program of
generator tasks on Ray 2.60 (its own environment, ``tests/tools/.ray-venv``) and on Ember,
and the outcomes must agree.

Where Ember means to differ (``EMBER_OWN``) Ember's answer is checked and Ray's printed: a
generator that yields more items than its static ``num_returns`` is an error the caller
sees (Ray keeps the first N and logs the error on the worker), and an async generator
function runs as a task (Ray 2.60 fails it with a TypeError of its own).
Without Ray's environment the test skips, except in CI where it fails naming the command.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from ember_test_utils import (
    differences_after_a_second_reading,
    require_ray_python,
    run_compare_programs_together,
)

ROOT = Path(__file__).resolve().parents[1]
PROGRAM = ROOT / "tests" / "tools" / "ray_generator_programs.py"

EMBER_OWN = {
    "static_more": ["raised", ["ValueError"]],
    "async_generator_task": ["ok", [0, 1]],
}


@pytest.mark.timeout(600)
def test_ray_and_ember_agree_on_generators():
    ray_python = require_ray_python()
    # No case measures speed: both runtimes run at once.
    ember, ray = run_compare_programs_together(PROGRAM, ray_python)
    differ, ray = differences_after_a_second_reading(PROGRAM, ray_python, ember, ray)
    assert not differ, f"Ember and Ray differ (ember, ray): {differ}"
    assert ember["own"] == EMBER_OWN
    print("Ray's own answers:", ray["own"])
