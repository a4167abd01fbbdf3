"""Node labels and selectors (``ember.labels``) and where a job's entrypoint goes
(``ember.dashboard.job_placement``), as Ray's rules have them."""

from __future__ import annotations

import pytest
from ember.dashboard.job_placement import NoMatchingNode, choose_node
from ember.labels import check_selector, matches, node_labels, parse_labels


def test_labels_parse_from_pairs_or_json_and_bad_ones_say_why():
    assert parse_labels("zone=a, disk=ssd") == {"zone": "a", "disk": "ssd"}
    assert parse_labels('{"example.com/rack": "r-1"}') == {"example.com/rack": "r-1"}
    with pytest.raises(ValueError, match="not KEY=VALUE"):
        parse_labels("zone")
    with pytest.raises(ValueError, match="ray.io/ prefix is the runtime's own"):
        parse_labels("ray.io/node-id=x")
    with pytest.raises(ValueError, match="value 'a b' must be"):
        parse_labels("zone=a b")
    with pytest.raises(ValueError, match="its name must be"):
        parse_labels("-zone=a")
    with pytest.raises(ValueError, match="not JSON"):
        parse_labels("{zone")


def test_selectors_match_as_rays_do():
    labels = {"zone": "a", "disk": "ssd"}
    assert matches({"zone": "a"}, labels) and not matches({"zone": "b"}, labels)
    assert matches({"zone": "!b"}, labels) and not matches({"zone": "!a"}, labels)
    assert matches({"zone": "in(b, a)"}, labels) and not matches({"zone": "in(b,c)"}, labels)
    assert matches({"zone": "!in(b,c)"}, labels) and not matches({"zone": "!in(a)"}, labels)
    # A node without the key fails a positive condition and passes a negative one.
    assert not matches({"gpu": "a100"}, labels) and matches({"gpu": "!a100"}, labels)
    assert matches({"zone": "a", "disk": "ssd"}, labels)
    assert not matches({"zone": "a", "disk": "hdd"}, labels)
    assert matches({}, labels)
    with pytest.raises(ValueError, match="lists an empty value"):
        check_selector({"zone": "in()"})
    with pytest.raises(ValueError, match="must be up to 63"):
        check_selector({"zone": "!" + "x" * 70})


HEAD, OTHER, THIRD = "aa" * 16, "bb" * 16, "cc" * 16


def _nodes() -> list[dict]:
    def node(nid: str, head: bool, labels: dict, free: float) -> dict:
        return {
            "node_id": nid,
            "is_head": head,
            "state": "ALIVE",
            "labels": labels,
            "resources_total": {"CPU": 2.0},
            "resources_available": {"CPU": free},
        }

    return [
        node(HEAD, True, {}, 2.0),
        node(OTHER, False, {"zone": "b"}, 0.0),
        node(THIRD, False, {"zone": "b"}, 2.0),
    ]


def test_a_job_asking_for_nothing_runs_on_the_head(monkeypatch):
    assert choose_node({}, _nodes()) == HEAD
    assert choose_node({"entrypoint_num_cpus": 0}, _nodes()) == HEAD  # zero asks for nothing
    monkeypatch.setenv("EMBER_JOB_ALLOW_DRIVER_ON_WORKER_NODES", "1")
    assert choose_node({}, _nodes()) is None


def test_resources_let_it_run_anywhere_and_labels_pick_a_node_that_fits():
    assert choose_node({"entrypoint_num_cpus": 1}, _nodes()) is None
    # Both zone-b nodes match; the one with a free CPU is chosen.
    rec = {"entrypoint_label_selector": {"zone": "b"}, "entrypoint_num_cpus": 1}
    assert choose_node(rec, _nodes()) == THIRD
    assert choose_node({"entrypoint_label_selector": {"ray.io/node-id": OTHER}}, _nodes()) == OTHER
    assert node_labels(OTHER, {"zone": "b"}) == {"zone": "b", "ray.io/node-id": OTHER}
    with pytest.raises(
        NoMatchingNode, match=r"selector \{'zone': 'c'\}.*zone.*ember start --labels"
    ):
        choose_node({"entrypoint_label_selector": {"zone": "c"}}, _nodes())
    dead = [{**n, "state": "DEAD"} for n in _nodes()]
    with pytest.raises(NoMatchingNode, match="no live node"):
        choose_node({"entrypoint_label_selector": {"zone": "b"}}, dead)
