"""Ray 2.x behaviours that Ray's own tests found missing in Ember: ``ember.util``'s node IP,
ids that name their job, options refused in ``.options()`` or finer than Ray's resource unit,
oversized functions, and ``_system_config`` when joining a cluster. Each test asserts what a
user sees; the ones that need a node share one (``shared_node``)."""

from __future__ import annotations

import ipaddress
import logging
import os

import ember
import pytest
from ember import ids, options, serialization
from ember.id_types import JobID, TaskID


# -- ember.util.get_node_ip_address -----------------------------------------------------------
def test_node_ip_address_without_a_node_is_an_ip_address():
    if ember.is_initialized():
        pytest.skip("another test of this process left a node running")
    ipaddress.ip_address(ember.util.get_node_ip_address())  # raises if it is not one
    assert "get_node_ip_address" in dir(ember.util)


def test_node_ip_address_is_the_nodes(shared_node):
    ip = ember.util.get_node_ip_address()
    assert ip in {n["NodeManagerAddress"] for n in ember.nodes()}

    @ember.remote(num_cpus=0)
    def in_a_task() -> str:
        return ember.util.get_node_ip_address()

    assert ember.get(in_a_task.remote(), timeout=60) == ip


# -- ids carry their job ------------------------------------------------------------------------
def test_runtime_context_is_a_module_of_the_package():
    import ember as ray

    assert ray.runtime_context.get_runtime_context is ember.get_runtime_context
    assert "runtime_context" in dir(ray)


def test_a_task_id_starts_with_its_jobs_id():
    job = b"jobjob01"
    task_id = ids.new_task_id(job)
    assert len(task_id) == ids.TASK_ID_SIZE
    assert TaskID(task_id).job_id() == JobID(job)
    assert ids.new_task_id(job) != task_id
    # With no job (a worker between jobs): the nil job, and the id keeps its size.
    assert TaskID(ids.new_task_id(b"")).job_id().is_nil()


def test_ids_made_in_a_task_name_the_tasks_job(shared_node):
    @ember.remote(num_cpus=0)
    def child() -> None:
        return None

    @ember.remote(num_cpus=0)
    def parent() -> list:
        ctx = ember.get_runtime_context()
        return [ctx.job_id, ctx.task_id.job_id(), ember.put(1).job_id(), child.remote().job_id()]

    job = ember.get_runtime_context().job_id
    assert ember.get(parent.remote(), timeout=60) == [job, job, job, job]
    assert parent.remote().job_id() == job
    assert ember.put(1).job_id() == job  # a driver's put: made outside any task


# -- options Ray refuses ------------------------------------------------------------------------
def test_max_calls_is_refused_in_options_and_allowed_in_the_decorator():
    @ember.remote(max_calls=2)
    def f() -> int:
        return 1

    with pytest.raises(
        ValueError, match=r"Setting 'max_calls' is not supported in '\.options\(\)'\."
    ):
        f.options(max_calls=3)
    f.options(num_cpus=1)  # other options still work


def test_concurrency_groups_are_refused_in_options_and_allowed_in_the_decorator():
    @ember.remote(concurrency_groups={"io": 2})
    class A:
        pass

    with pytest.raises(
        ValueError, match=r"Setting 'concurrency_groups' is not supported in '\.options\(\)'\."
    ):
        A.options(concurrency_groups={"io": 1})


@pytest.mark.parametrize(
    ("opts", "resource"),
    [
        ({"num_gpus": 1e-7}, "num_gpus"),
        ({"num_cpus": 1e-7}, "num_cpus"),
        ({"resources": {"custom": 1e-7}}, "custom"),
    ],
)
def test_resource_quantities_finer_than_ray_s_unit_are_refused(opts, resource):
    message = f"precision of the fractional quantity of resource {resource} cannot go beyond 0.0001"
    with pytest.raises(ValueError, match=message):
        ember.remote(**opts)(lambda: None)

    def g() -> None:
        pass

    with pytest.raises(ValueError, match=message):
        ember.remote(g).options(**opts)


def test_zero_and_a_ten_thousandth_are_allowed():
    def g() -> None:
        pass

    ember.remote(num_gpus=0.0, num_cpus=0.0001, resources={"custom": 0.0})(g)
    ember.remote(g).options(num_gpus=0.5, resources={"custom": 0.00015})


# -- oversized functions --------------------------------------------------------------------
def test_a_function_over_the_error_threshold_is_refused_naming_it():
    assert serialization.FUNCTION_SIZE_ERROR_THRESHOLD == 10**8
    big = b"\0" * (10**8 + 1)

    def captures_big() -> int:
        return len(big)

    with pytest.raises(ValueError) as err:
        serialization.dumps_function(captures_big)
    text = str(err.value)
    assert "remote function" in text and "captures_big" in text
    assert "is too large (95 MiB > FUNCTION_SIZE_ERROR_THRESHOLD=95 MiB)" in text
    assert "ember.put()" in text


def test_an_actor_class_over_the_threshold_is_refused_at_remote(shared_node, monkeypatch):
    monkeypatch.setattr(serialization, "FUNCTION_SIZE_WARN_THRESHOLD", 1000)
    monkeypatch.setattr(serialization, "FUNCTION_SIZE_ERROR_THRESHOLD", 10_000)
    big = b"\0" * 20_000

    @ember.remote(num_cpus=0)
    class Holder:
        def size(self) -> int:
            return len(big)

    with pytest.raises(ValueError, match=r"The actor .*Holder is too large .*ember\.put\(\)"):
        Holder.remote()

    @ember.remote(num_cpus=0)
    def uses_big() -> int:
        return len(big)

    with pytest.raises(ValueError, match=r"The remote function .*uses_big is too large"):
        uses_big.remote()


def test_a_large_function_under_the_threshold_warns(monkeypatch, caplog):
    monkeypatch.setattr(serialization, "FUNCTION_SIZE_WARN_THRESHOLD", 1000)
    big = b"\0" * 5000

    def medium() -> int:
        return len(big)

    with caplog.at_level(logging.WARNING, logger="ember"):
        serialization.dumps_function(medium)
    assert "medium is very large" in caplog.text


# -- _system_config when joining a cluster -------------------------------------------------
def test_system_config_is_refused_when_joining_a_cluster():
    message = "When connecting to an existing cluster, _system_config must not be provided"
    with pytest.raises(ValueError, match=message):
        options.check_init_joining("127.0.0.1:6379", {"_system_config": {"num_heartbeats": 3}})
    options.check_init_joining(None, {"_system_config": {"x": 1}})  # starting a node: allowed
    options.check_init_joining("127.0.0.1:6379", {"_system_config": {}})  # empty: as Ray


def test_init_with_an_address_and_system_config_raises():
    ember.shutdown()  # the shared node, if any: init must not see a driver already connected
    with pytest.raises(ValueError, match="_system_config must not be provided"):
        ember.init(address="127.0.0.1:1", _system_config={"num_heartbeats": 3})
    ember.shutdown()


# -- names Ray's programs use ----------------------------------------------------------------
def test_ray_names_a_migrated_program_catches_or_calls_exist():
    errors = ember.exceptions
    lost = [
        errors.ObjectFreedError,
        errors.ObjectFetchTimedOutError,
        errors.ObjectReconstructionFailedError,
        errors.ObjectReconstructionFailedMaxAttemptsExceededError,
        errors.ObjectReconstructionFailedLineageEvictedError,
        errors.ReferenceCountingAssertionError,
    ]
    assert all(issubclass(c, errors.ObjectLostError) for c in lost)
    assert issubclass(errors.ReferenceCountingAssertionError, AssertionError)
    for name in (
        "LocalRayletDiedError",
        "TaskPlacementGroupRemoved",
        "ActorPlacementGroupRemoved",
        "AsyncioActorExit",
        "OutOfDiskError",
        "CrossLanguageError",
    ):
        assert issubclass(getattr(errors, name), errors.RayError), name
    assert ember.cloudpickle.loads(ember.cloudpickle.dumps(lambda x: x + 1))(1) == 2


def test_init_takes_a_job_config_runtime_env_namespace_and_metadata():
    from ember.job_config import JobConfig

    ember.shutdown()
    config = JobConfig(
        runtime_env={"env_vars": {"JOB_CONFIG_MARK": "on"}},
        metadata={"team": "sim"},
        ray_namespace="from-job-config",
    )
    ember.init(num_cpus=1, job_config=config, include_dashboard=False)
    try:

        @ember.remote
        def seen() -> list:
            ctx = ember.get_runtime_context()
            return [os.environ.get("JOB_CONFIG_MARK"), ctx.namespace]

        assert ember.get(seen.remote(), timeout=60) == ["on", "from-job-config"]
        jobs = ember.global_state.worker.call_gcs_sync("list_jobs", None)
        assert [j.get("metadata") for j in jobs] == [{"team": "sim"}]
    finally:
        ember.shutdown()
    with pytest.raises(ValueError, match="default_actor_lifetime='detached' is not supported"):
        JobConfig(default_actor_lifetime="detached")
    with pytest.raises(TypeError, match="job_config must be"):
        ember.init(job_config={"runtime_env": {}})
