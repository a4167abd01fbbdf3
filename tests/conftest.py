"""Shared fixtures. Every test that starts Ember stops it, and the session fails if any Ember
process started by the test run is still alive at the end (a leak is a failing test)."""

from __future__ import annotations

import os

import ember
import pytest
from ember_test_utils import assert_no_ember_children


@pytest.fixture
def ember_start():
    """A local node for one test; stopped (and checked for leaks) afterwards."""
    started = []

    def start(**kwargs):
        if ember.is_initialized():
            ember.shutdown()  # a test that needs its own node must not share one
        kwargs.setdefault("num_cpus", 2)
        ctx = ember.init(**kwargs)
        started.append(ctx)
        return ctx

    yield start
    ember.shutdown()
    assert_no_ember_children()


@pytest.fixture
def shared_node(_module_node_cleanup):
    """A local node (2 CPUs) shared by the tests of a module that do not disturb each other."""
    if not ember.is_initialized():
        ember.init(num_cpus=2)
    return True


@pytest.fixture(scope="module")
def _module_node_cleanup():
    yield
    ember.shutdown()
    assert_no_ember_children()


@pytest.fixture(autouse=True, scope="session")
def _no_leaks_at_end():
    yield
    if ember.is_initialized():
        ember.shutdown()
    assert_no_ember_children()
    leftovers = [f for f in os.listdir("/dev/shm") if f.startswith(f"ember-{os.getpid()}-")]
    assert not leftovers, f"shared-memory arenas left behind: {leftovers}"


_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(autouse=True)
def _no_stray_files_in_the_repo(request):
    """Warns, naming the test, when a file appears at the repo's root while it runs: empty
    files with garbage names ("F\\u00b2") appeared there twice during full runs, from a test
    or a process it started (which inherit this directory), and no one test reproduced it."""
    before = set(os.listdir(_REPO_ROOT))
    yield
    # Tools' own caches (hypothesis makes its directory on first use, database or not), and
    # the browser tests' screenshots (git-ignored, made by the first of them to run).
    new = set(os.listdir(_REPO_ROOT)) - before - {".hypothesis", ".pytest_cache", "test-artifacts"}
    if new:
        import warnings

        warnings.warn(
            f"{request.node.nodeid} left new entries at the repo root: {sorted(new)!r}",
            stacklevel=1,
        )
