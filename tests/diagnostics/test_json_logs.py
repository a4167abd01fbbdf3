"""Logs as data: a node started with ``EMBER_LOG_FORMAT=json`` writes its components' log
files (GCS, raylet, dashboard, agent, a worker's own Ember records) as one JSON object a
line, with the component, the node id and, in a worker, the job and task; the user's prints
stay text; ``ember logs`` shows the JSON lines as text and the logs search matches inside
their messages. ``ember.init(logging_config=LoggingConfig(encoding="JSON"))`` does the same
for the node it starts."""

from __future__ import annotations

import glob
import json
import logging
import os
import re
import urllib.parse
import urllib.request

import ember
import pytest
from ember.log_format import LoggingConfig, readable
from ember_test_utils import ember_cli, head_cluster, wait_until

pytestmark = pytest.mark.timeout(180)
COMPONENTS = ("gcs_server", "raylet", "dashboard", "agent")


def _records(path: str) -> list[dict]:
    """Every line of the file, each parsed as JSON (a line that is not fails the test)."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    out = []
    for no, line in enumerate(lines, 1):
        try:
            out.append(json.loads(line))
        except ValueError:
            pytest.fail(f"{path}:{no} is not JSON: {line!r}")
    return out


@ember.remote
def chatty(word: str) -> str:
    # An Ember logger in the worker: its record goes to the worker's .log, as JSON.
    logging.getLogger("ember.test_json_logs").warning('the task said "%s"', word)
    print(f"plain print {word}", flush=True)  # the user's output: stays text in .out
    return ember.get_runtime_context().get_task_id()


def test_node_writes_json_lines_and_ember_logs_reads_them(monkeypatch):
    monkeypatch.setenv("EMBER_LOG_FORMAT", "json")
    if ember.is_initialized():
        ember.shutdown()
    with head_cluster(prefix="emb-json-") as (root, port, _):
        monkeypatch.delenv("EMBER_LOG_FORMAT")  # the driver's own process: as usual
        ctx = ember.init(address=f"127.0.0.1:{port}")
        try:
            rc = ember.get_runtime_context()
            node_id, job_id = rc.get_node_id(), rc.get_job_id()
            task_id = ember.get(chatty.remote("naïve"))
            session = ctx["session_dir"]
            logs = os.path.join(session, "logs")

            def worker_log() -> str | None:
                for path in glob.glob(os.path.join(logs, "worker-*.log")):
                    if "the task said" in open(path, encoding="utf-8").read():
                        return path
                return None

            wlog = wait_until(worker_log, timeout=30, interval=0.2, message="the worker's log")
            (rec,) = [r for r in _records(wlog) if "the task said" in r["message"]]
            assert rec["message"] == 'the task said "naïve"'
            assert (rec["component"], rec["node_id"], rec["level"]) == (
                "worker",
                node_id,
                "WARNING",
            )
            assert (rec["job_id"], rec["task_id"]) == (job_id, task_id)
            assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00", rec["time"])
            out = wlog.removesuffix(".log") + ".out"
            assert "plain print naïve\n" in open(out, encoding="utf-8").read()

            for component in COMPONENTS:
                path = os.path.join(logs, f"{component}.log")
                wait_until(lambda p=path: os.path.getsize(p) > 0, timeout=30, message=path)
                records = _records(path)
                assert {r["component"] for r in records} == {component}, path
                assert {r["node_id"] for r in records} == {node_id}, path
                assert all(r["level"] in ("DEBUG", "INFO", "WARNING", "ERROR") for r in records)

            # ember logs: the JSON lines as text, the raw lines with --raw.
            cli = [ember_cli(), "logs", "--temp-dir", root, "--address", ctx.dashboard_url]
            shown = _run([*cli, "raylet.log", "--tail", "5"])
            lines = shown.splitlines()
            assert lines and all(
                re.match(rf"\S+T\S+ [A-Z]+ raylet \[node={node_id[:12]}\]: ", ln) for ln in lines
            ), shown
            raw = _run([*cli, "raylet.log", "--tail", "5", "--raw"]).splitlines()
            assert [readable(ln) for ln in raw] == lines
            # The dashboard lists a node's log files as its agent reports them (a new file
            # within a moment of its first line): wait for the worker's to be listed.
            listed = [*cli, "--format", "json"]
            wait_until(
                lambda: os.path.basename(wlog) in {f["name"] for f in json.loads(_run(listed))},
                timeout=30,
                interval=0.3,
                message="the worker's log listed",
            )
            worker = _run([*cli, os.path.basename(wlog), "--tail", "50"])
            assert f"[node={node_id[:12]} job={job_id[:12]} task={task_id[:12]}]: " in worker
            assert 'the task said "naïve"' in worker

            # The search matches inside the message, whose quotes the JSON escapes.
            q = urllib.parse.urlencode({"node_id": node_id, "pattern": 'said "naïve"'})
            with urllib.request.urlopen(f"{ctx.dashboard_url}/api/logs/search?{q}") as resp:
                found = json.load(resp)["matches"]
            by_file = {m["name"]: m["line"] for m in found}
            # The .log's JSON line (its raw text holds \"naïve\"), and the warning's text copy
            # on stderr (for log_to_driver).
            assert set(by_file) == {os.path.basename(wlog), os.path.basename(out)[:-4] + ".err"}
            assert json.loads(by_file[os.path.basename(wlog)])["task_id"] == task_id
        finally:
            ember.shutdown()


def _run(argv: list[str]) -> str:
    import subprocess

    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_init_logging_config_json():
    if ember.is_initialized():
        ember.shutdown()
    with pytest.raises(ValueError, match="unknown log encoding 'XML': use one of TEXT, JSON"):
        LoggingConfig(encoding="XML")
    with pytest.raises(ValueError, match="unknown log level 'LOUD'"):
        LoggingConfig(log_level="LOUD")
    ctx = ember.init(num_cpus=1, logging_config=ember.LoggingConfig(encoding="JSON"))
    try:
        node_id = ember.get_runtime_context().get_node_id()
        path = os.path.join(ctx["session_dir"], "logs", "raylet.log")
        wait_until(lambda: os.path.getsize(path) > 0, timeout=30, message=path)
        records = _records(path)
        assert {(r["component"], r["node_id"]) for r in records} == {("raylet", node_id)}
    finally:
        ember.shutdown()
