"""request_resources' argument checks and the stored form the autoscaler reads back."""

from __future__ import annotations

import json

import pytest
from ember.autoscaler.sdk import read_request, to_bundles


def test_cpus_and_bundles_become_one_list() -> None:
    assert to_bundles(2, [{"GPU": 1, "CPU": 0}]) == [{"CPU": 1.0}, {"CPU": 1.0}, {"GPU": 1.0}]
    assert to_bundles() == [] and to_bundles(num_cpus=0) == []


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_cpus": -1}, "num_cpus must be a whole number >= 0, got -1"),
        ({"num_cpus": 1.5}, "num_cpus must be a whole number >= 0, got 1.5"),
        ({"bundles": [["CPU", 1]]}, r"bundles\[0\] must be a dict of resource amounts"),
        ({"bundles": [{"CPU": -2}]}, r"bundles\[0\]: 'CPU': -2 is not a resource amount >= 0"),
        ({"bundles": [{"CPU": "1"}]}, r"bundles\[0\]: 'CPU': '1' is not a resource amount"),
        ({"num_cpus": 10_001}, "at most 10000 bundles per request, got 10001"),
    ],
)
def test_bad_requests_are_refused_naming_the_value(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        to_bundles(**kwargs)


def test_the_stored_request_is_read_back_and_a_bad_one_ignored() -> None:
    assert read_request(json.dumps([{"CPU": 2}]).encode()) == [{"CPU": 2.0}]
    assert read_request(None) == [] and read_request(b"") == []
    assert read_request(b"not json") == [] and read_request(b'[{"CPU": -1}]') == []
