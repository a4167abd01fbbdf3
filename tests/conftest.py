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


# The files whose tests take longest (50 s or more in all, measured on the 2-core development
# VM, 2026-11-29): collected first, and run first (``scripts/dev.sh`` passes
# ``--no-loadscope-reorder``: xdist would otherwise hand out the files with the most tests
# first, which left the long one-test files for last, one process running them while the
# others were done). The ones that run Ray (``*ray*compare``) are every third, so that at
# the start, when each process takes its first files, no two start Ray at once.
LONGEST_FILES = (
    "tests/test_ray_semantics_compare.py",
    "tests/diagnostics/test_timeline.py",
    "tests/cluster/test_launcher_local_ssh.py",
    "tests/test_tune_ray_compare.py",
    "tests/frontend/test_wheel_install.py",
    "tests/cluster/test_cluster_failures.py",
    "tests/serve/test_serve_ray_compare.py",
    "tests/dashboard/test_fuzz.py",
    "tests/test_tasks.py",
    "tests/test_ray_actor_semantics_compare.py",
    "tests/test_lifecycle.py",
    "tests/test_objects.py",
    "tests/test_util_ray_compare.py",
    "tests/cluster/test_cli_habits.py",
    "tests/serve/test_serve_app.py",
    "tests/test_tune_run.py",
)


def pytest_collection_modifyitems(config, items) -> None:
    """Moves the tests of ``LONGEST_FILES`` to the front, in that order; every file's tests
    stay together and in their own order, and the other files keep theirs."""
    rank = {name: i for i, name in enumerate(LONGEST_FILES)}
    last = len(rank)
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], last))
