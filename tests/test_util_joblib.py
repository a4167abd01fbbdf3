"""``ember.util.joblib``: joblib's ``Parallel`` on Ember (Ray's ``ray.util.joblib``).
joblib is an optional dependency, installed with the ``test`` extra."""

from __future__ import annotations

import os
import subprocess
import sys

import ember
import pytest
from ember_test_utils import wait_until

joblib = pytest.importorskip("joblib")

from ember.util.joblib import EmberBackend, register_ember, register_ray  # noqa: E402
from joblib import Parallel, delayed  # noqa: E402
from joblib._parallel_backends import SequentialBackend  # noqa: E402
from joblib.parallel import BatchedCalls  # noqa: E402


def double(x: int) -> int:
    return 2 * x


def where(_: object = None) -> int:
    return os.getpid()


def fail_on_two(x: int) -> int:
    if x == 2:
        raise KeyError(f"two ({x})")
    return x


def row_sum(data: list[int], i: int) -> int:
    return data[i] + len(data)


@pytest.fixture(autouse=True)
def _registered():
    register_ember()
    register_ray()


def test_parallel_backend_ember(shared_node):
    with joblib.parallel_backend("ember"):  # n_jobs=-1: the cluster's 2 CPUs
        assert Parallel()(delayed(double)(i) for i in range(10)) == [2 * i for i in range(10)]
        pids = set(Parallel(batch_size=1)(delayed(where)() for _ in range(6)))
    assert os.getpid() not in pids and len(pids) == 2


def test_parallel_config_and_the_ray_alias(shared_node):
    with joblib.parallel_config(backend="ember", n_jobs=2):
        assert Parallel()(delayed(double)(i) for i in range(5)) == [0, 2, 4, 6, 8]
    with joblib.parallel_config(backend="ray", n_jobs=2):  # a program moved from Ray
        assert Parallel()(delayed(double)(i) for i in range(5)) == [0, 2, 4, 6, 8]
        assert list(Parallel(return_as="generator")(delayed(double)(i) for i in range(3))) == [
            0,
            2,
            4,
        ]


def test_n_jobs_counts_the_clusters_cpus(shared_node):
    with joblib.parallel_config(backend="ember"):
        assert joblib.effective_n_jobs(-1) == 2
        assert joblib.effective_n_jobs(-2) == 1
        assert joblib.effective_n_jobs(2) == 2
        with pytest.raises(ValueError):
            joblib.effective_n_jobs(0)
    # One job runs here, as with joblib's process backends.
    with joblib.parallel_config(backend="ember", n_jobs=1):
        assert set(Parallel()(delayed(where)() for _ in range(2))) == {os.getpid()}


def test_an_error_is_raised_as_itself(shared_node):
    with joblib.parallel_config(backend="ember", n_jobs=2):
        with pytest.raises(KeyError, match="two"):
            Parallel()(delayed(fail_on_two)(i) for i in range(5))
        # The backend is usable again after an aborted call.
        assert Parallel()(delayed(double)(i) for i in range(3)) == [0, 2, 4]


def free_cpus(_: object = None) -> float:
    return ember.available_resources().get("CPU", 0)


def test_ray_remote_args_reach_the_actors(shared_node):
    with joblib.parallel_config(backend="ember", n_jobs=2):
        # By default the pool's actors hold no CPU (as Ray's), leaving them to nested work.
        assert set(Parallel(batch_size=1)(delayed(free_cpus)() for _ in range(2))) == {2}
    with joblib.parallel_config(backend="ember", n_jobs=2, ray_remote_args={"num_cpus": 1}):
        assert set(Parallel(batch_size=1)(delayed(free_cpus)() for _ in range(2))) == {0}


def test_a_large_shared_argument_is_put_once(shared_node):
    backend = EmberBackend()
    data = list(range(20_000))  # ~160 KB shallow: above the sharing threshold
    try:
        backend.configure(n_jobs=2)
        inner = (SequentialBackend(nesting_level=1), None)  # what nested calls would use
        batches = [BatchedCalls([(row_sum, (data, i), {})], inner) for i in range(3)]
        wrapped = [backend._share_large_args(b) for b in batches]
        assert len(backend._shared) == 1  # one put for the three batches
        assert [w() for w in wrapped] == [[20_000 + i] for i in range(3)]
        small = BatchedCalls([(row_sum, ([1, 2], 0), {})], inner)
        assert backend._share_large_args(small) is small  # small arguments travel inline
    finally:
        backend.terminate()
    assert not backend._shared
    with joblib.parallel_config(backend="ember", n_jobs=2):  # the same through Parallel
        assert Parallel()(delayed(row_sum)(data, i) for i in range(4)) == [
            20_000 + i for i in range(4)
        ]


def test_a_missing_joblib_is_a_clear_import_error():
    code = (
        "import sys\n"
        "sys.modules['joblib'] = None\n"
        "sys.modules['joblib.parallel'] = None\n"
        "try:\n    import ember.util.joblib\n"
        "except ImportError as e:\n    print(e)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert "pip install 'ember[joblib]'" in out.stdout


def test_pools_end_with_each_call(shared_node):
    """Each Parallel call's pool is terminated at its end: no actors pile up."""
    before = len(ember.util.state.list_actors(filters=[("state", "=", "ALIVE")]))
    with joblib.parallel_config(backend="ember", n_jobs=2):
        for _ in range(2):
            Parallel()(delayed(double)(i) for i in range(4))
    wait_until(
        lambda: len(ember.util.state.list_actors(filters=[("state", "=", "ALIVE")])) <= before,
        timeout=30,
    )
