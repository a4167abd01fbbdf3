"""A Tune trial whose node is SIGKILLed (a crashed machine) restarts on the surviving node from
its latest checkpoint and finishes (FailureConfig(max_failures=1))."""

from __future__ import annotations

import json
import tempfile
import threading
import time
from pathlib import Path

import ember
from ember import tune


def parks_once(config):
    """Reports a checkpoint per step; in its first run, after the checkpoint at i=1, leaves its
    node's id in a file and parks until the test kills that node."""
    start = 0
    checkpoint = tune.get_checkpoint()
    if checkpoint:
        with checkpoint.as_directory() as d:
            start = json.loads(Path(d, "state.json").read_text())["i"] + 1
    node_id = ember.get_runtime_context().get_node_id()
    for i in range(start, 4):
        with tempfile.TemporaryDirectory() as d:
            Path(d, "state.json").write_text(json.dumps({"i": i}))
            tune.report(
                {"i": i, "resumed_at": start, "node": node_id},
                checkpoint=tune.Checkpoint.from_directory(d),
            )
        if i == 1 and start == 0:
            Path(config["scratch"], "node").write_text(node_id)
            time.sleep(120)  # the node is killed here


def test_a_trial_whose_node_dies_restarts_elsewhere_from_its_checkpoint(cluster, tmp_path):
    first = cluster.add_node(num_cpus=2)
    second = cluster.add_node(num_cpus=2)
    cluster.connect()
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    killed: list[str] = []

    def kill_its_node() -> None:
        deadline = time.monotonic() + 120
        marker = scratch / "node"
        while time.monotonic() < deadline and not (marker.exists() and marker.read_text()):
            time.sleep(0.05)
        if marker.exists():
            victim = next(n for n in (first, second) if n.node_id.hex() == marker.read_text())
            cluster.remove_node(victim, allow_graceful=False)
            killed.append(victim.node_id.hex())

    killer = threading.Thread(target=kill_its_node, daemon=True)
    killer.start()
    grid = tune.Tuner(
        tune.with_resources(parks_once, {"cpu": 2}),  # more than the head (1 CPU) has
        param_space={"scratch": str(scratch)},
        run_config=tune.RunConfig(
            name="node_dies",
            storage_path=str(tmp_path),
            verbose=0,
            failure_config=tune.FailureConfig(max_failures=1),
        ),
    ).fit()
    killer.join(timeout=10)
    result = grid[0]
    assert result.status == "TERMINATED" and result.error is None
    rows = [json.loads(x) for x in Path(result.path, "result.json").read_text().splitlines()]
    assert [(r["i"], r["resumed_at"]) for r in rows] == [(0, 0), (1, 0), (2, 2), (3, 2)]
    # The first run was on the killed node, the restart on the other one.
    assert killed == [rows[0]["node"]]
    assert rows[2]["node"] != rows[0]["node"] and rows[2]["node"] in {
        first.node_id.hex(),
        second.node_id.hex(),
    }
    assert "Failure # 1 (occurred at " in Path(result.path, "error.txt").read_text()
