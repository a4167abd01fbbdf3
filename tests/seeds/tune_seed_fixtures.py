"""Fixtures shared by the seed's Tune modules (``test_seed_tune_guide.py``,
``test_seed_tune_reference.py``): one node per module, and ``~`` / the default results
directory under the test's tmp_path, so "~/ray_results/..." in a program finds what it wrote.
Imported by name into each module (pytest finds fixtures imported into a test module)."""

from __future__ import annotations

import ember as ray
import pytest

__all__ = ["clean_runtime", "node", "results"]


@pytest.fixture
def clean_runtime():
    """The module shares one node (overrides the per-test shutdown of the seeds' conftest)."""
    yield


@pytest.fixture(scope="module")
def node(_module_node_cleanup):
    if ray.is_initialized():
        ray.shutdown()
    return ray.init(num_cpus=4)


@pytest.fixture
def results(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("EMBER_RESULTS_DIR", str(tmp_path / "ray_results"))
    monkeypatch.chdir(tmp_path)
    return tmp_path / "ray_results"
