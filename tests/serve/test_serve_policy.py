"""Serve's pure parts, as tables: the autoscaling policy, settings checks, config-file checks,
route matching, and @serve.batch on an event loop (no cluster)."""

from __future__ import annotations

import asyncio

import pytest
from ember.serve.autoscaling import PolicyState, decide, desired_replicas
from ember.serve.batching import batch
from ember.serve.config import AutoscalingConfig, ConfigError, deployment_config
from ember.serve.proxy import match_route
from ember.serve.schema import validate

CFG = AutoscalingConfig(
    min_replicas=1,
    max_replicas=10,
    target_ongoing_requests=2,
    upscale_delay_s=3,
    downscale_delay_s=10,
)


@pytest.mark.parametrize(
    ("current", "ongoing", "want"),
    [
        (1, 0, 1),  # floor at min_replicas
        (1, 2, 1),  # exactly on target
        (1, 3, 2),  # 1.5x target -> ceil
        (2, 8, 4),
        (4, 2, 1),  # way under: down to what the load needs
        (3, 100, 10),  # ceiling at max_replicas
        (0, 5, 3),  # cold start: ceil(5 / 2)
        (0, 0, 1),  # min_replicas even with nothing to do
    ],
)
def test_desired_replicas_follow_ongoing_requests(current: int, ongoing: float, want: int) -> None:
    assert desired_replicas(CFG, current, ongoing) == want


def test_scaling_up_waits_for_the_upscale_delay() -> None:
    state = PolicyState()
    steps = []
    for now in (0.0, 1.0, 2.9, 3.0):
        target, state, reason = decide(CFG, 2, 8, now, state)
        steps.append(target)
    assert steps == [2, 2, 2, 4]
    assert "8 ongoing requests" in reason and "target 2" in reason


def test_a_dip_restarts_the_delay() -> None:
    state = PolicyState()
    _, state, _ = decide(CFG, 2, 8, 0.0, state)
    _, state, _ = decide(CFG, 2, 4, 2.0, state)  # back on target: the wish is forgotten
    target, state, _ = decide(CFG, 2, 8, 3.5, state)
    assert target == 2  # the 3 s count again from 3.5
    target, _, _ = decide(CFG, 2, 8, 6.5, state)
    assert target == 4


def test_scaling_down_waits_for_the_longer_downscale_delay() -> None:
    state = PolicyState()
    targets = []
    for now in (0.0, 5.0, 9.9, 10.0):
        target, state, _ = decide(CFG, 4, 1, now, state)
        targets.append(target)
    assert targets == [4, 4, 4, 1]


def test_cold_start_is_immediate() -> None:
    cfg = AutoscalingConfig(min_replicas=0, max_replicas=5, upscale_delay_s=60)
    target, _, reason = decide(cfg, 0, 1, 0.0, PolicyState())
    assert target == 1 and "cold start" in reason


def test_upscaling_factor_moves_part_of_the_way() -> None:
    cfg = AutoscalingConfig(max_replicas=100, target_ongoing_requests=1, upscaling_factor=0.5)
    assert desired_replicas(cfg, 10, 30) == 20  # 3x wanted, half the way: 2x


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"num_replicas": -1}, "num_replicas must be a whole number >= 0, got -1"),
        ({"num_replicas": 2, "autoscaling_config": {"max_replicas": 3}}, "cannot both be set"),
        ({"max_ongoing_requests": 0}, "max_ongoing_requests must be a whole number >= 1, got 0"),
        ({"num_replica": 2}, "unknown field(s) num_replica"),
        (
            {"autoscaling_config": {"min_replicas": 3, "max_replicas": 2}},
            "max_replicas (2) must be >= 1 and >= min_replicas (3)",
        ),
        (
            {"autoscaling_config": {"target_ongoing": 1}},
            "autoscaling_config: unknown field(s) target_ongoing",
        ),
        ({"user_config": {"f": object()}}, "user_config must be JSON-serializable"),
        ({"health_check_period_s": "10"}, "health_check_period_s must be a number >= 0"),
    ],
)
def test_bad_deployment_options_name_the_field(options: dict, message: str) -> None:
    with pytest.raises(ConfigError) as e:
        deployment_config(**options)
    assert message in str(e.value)


def test_num_replicas_auto_means_autoscaling() -> None:
    c = deployment_config(num_replicas="auto")
    assert c.num_replicas is None and c.autoscaling_config.max_replicas == 100


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            {"applications": [{"import_path": "m:app", "nmae": "x"}]},
            "applications[0]: unknown field(s) nmae",
        ),
        (
            {
                "applications": [
                    {"import_path": "m:app", "deployments": [{"name": "A", "num_replica": 1}]}
                ]
            },
            "applications[0].deployments[0]: unknown field(s) num_replica",
        ),
        (
            {
                "applications": [
                    {"import_path": "m:app", "deployments": [{"name": "A", "num_replicas": -2}]}
                ]
            },
            "applications[0].deployments[0] (A): num_replicas must be a whole number >= 0",
        ),
        (
            {
                "applications": [
                    {"import_path": "a:x", "name": "a"},
                    {"import_path": "b:x", "name": "b"},
                ]
            },
            "applications[1].route_prefix '/' is also used by application 'a'",
        ),
        ({"applications": []}, "'applications' must be a non-empty list"),
        (
            {"applications": [{"import_path": "m:app"}], "http_option": {}},
            "config: unknown field(s) http_option",
        ),
        ({"applications": [{"import_path": "m"}]}, "import_path must be 'module:attribute'"),
    ],
)
def test_bad_config_files_name_the_field(config: dict, message: str) -> None:
    with pytest.raises(ConfigError) as e:
        validate(config)
    assert message in str(e.value)


@pytest.mark.parametrize(
    ("path", "want"),
    [
        ("/", "/"),
        ("/api", "/api"),
        ("/api/v1/x", "/api/v1"),
        ("/api/v2", "/api"),
        ("/apix", "/"),  # a prefix matches whole path segments only
        ("/other", "/"),
    ],
)
def test_the_longest_route_prefix_wins(path: str, want: str) -> None:
    assert match_route({"/": 1, "/api": 2, "/api/v1": 3}, path) == want


def test_no_route_without_a_root_app() -> None:
    assert match_route({"/api": 1}, "/x") is None


def test_batch_gathers_concurrent_calls() -> None:
    sizes = []

    class Model:
        @batch(max_batch_size=4, batch_wait_timeout_s=0.5)
        async def __call__(self, xs: list[int]) -> list[int]:
            sizes.append(len(xs))
            return [x * 10 for x in xs]

    async def main() -> list[int]:
        m = Model()
        return await asyncio.gather(*(m(i) for i in range(10)))

    assert asyncio.run(main()) == [i * 10 for i in range(10)]
    assert sizes == [4, 4, 2]  # full batches at once; the rest after the wait


def test_batch_wrong_result_count_fails_each_caller() -> None:
    @batch(max_batch_size=2, batch_wait_timeout_s=0.05)
    async def broken(xs: list[int]) -> list[int]:
        return [1]

    async def main() -> list:
        return await asyncio.gather(broken(1), broken(2), return_exceptions=True)

    results = asyncio.run(main())
    assert all(
        isinstance(r, TypeError) and "returned 1 results for a batch of 2" in str(r)
        for r in results
    )


def test_batch_rejects_a_bad_size() -> None:
    with pytest.raises(ValueError, match="max_batch_size must be an integer >= 1, got 0"):
        batch(max_batch_size=0)
