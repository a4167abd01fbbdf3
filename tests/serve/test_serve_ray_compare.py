"""Serve side by side: ``tests/tools/ray_serve_programs.py`` runs one set of Serve programs
(function and class deployments over HTTP and handles, composition, FastAPI ingress, batching,
streaming, user_config, bad input, a killed replica, delete) on Ray Serve 2.60 (its own
environment, ``tests/tools/.ray-venv``) and on ember.serve; what a user reads must agree.

Without Ray's environment (with ``ray[serve]``) the test skips, except in CI where it fails.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from ember_test_utils import require_ray_python, run_compare_programs_together

ROOT = Path(__file__).resolve().parents[2]
PROGRAM = ROOT / "tests" / "tools" / "ray_serve_programs.py"


@pytest.mark.timeout(600)
def test_ray_serve_and_ember_serve_agree():
    ray_python = require_ray_python()
    probe = subprocess.run(
        [str(ray_python), "-c", "import ray.serve, fastapi"], capture_output=True
    )
    if probe.returncode != 0:
        pytest.skip("Ray's environment lacks ray[serve]; run scripts/dev.sh setup")
    ember, ray = run_compare_programs_together(PROGRAM, ray_python)
    print("per case (s): Ember", ember["seconds"], "Ray", ray["seconds"])
    differ = {
        case: (ember["same"].get(case), ray["same"].get(case))
        for case in ember["same"] | ray["same"]
        if ember["same"].get(case) != ray["same"].get(case)
    }
    assert not differ, f"Ember and Ray differ (ember, ray): {differ}"
    # Where Ember means to differ: a user_config change through serve.run keeps the replica
    # (Ray 2.60 replaces it: each imperative serve.run is a new code version there)
    assert ember["own"] == {"user_config_same_replica": True}
    print("Ray's own answers:", ray["own"])
