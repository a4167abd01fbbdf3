"""Each task's own log lines (Ray's ``task_log_info``): tasks printing distinct lines one
after another on one reused worker each read back only their own lines, through the task
detail, the task-log endpoint, Ray's state row (``/api/v0/tasks``, and Ray 2.60's own ``ray get
tasks``), Ray's ``/api/v0/logs/file?task_id=``, ``get_log(task_id=)`` and ``ember logs
--task-id``; and the byte offsets are the file's own."""

from __future__ import annotations

import os
import subprocess
import sys

import ember
import httpx
import pytest
import yaml
from ember_test_utils import require_ray_python, wait_until

pytestmark = pytest.mark.timeout(120)


@ember.remote(num_cpus=2)  # both CPUs: the three tasks run one by one on one worker
def talk(tag: str, fail: bool = False) -> int:
    import os

    print(f"{tag} line one")
    print(f"{tag} line two")
    print(f"{tag} on stderr", file=sys.stderr)
    if fail:
        raise ValueError(f"{tag} fails")
    return os.getpid()


def _ended(http: httpx.Client, task_id: str) -> dict:
    def done():
        r = http.get(f"/api/tasks/{task_id}")
        row = r.json() if r.status_code == 200 else {}
        return row if row.get("state") in ("FINISHED", "FAILED") else None

    return wait_until(done, timeout=30, message=f"task {task_id} ended on the dashboard")


def test_each_task_reads_only_its_own_lines(live):
    _, http, _ = live
    refs = []
    pids = set()
    for tag in ("alpha", "bravo"):
        ref = talk.remote(tag)
        pids.add(ember.get(ref))
        refs.append(ref)
    bad = talk.remote("charlie", fail=True)
    with pytest.raises(ValueError):
        ember.get(bad)
    refs.append(bad)
    assert len(pids) == 1, f"the tasks ran on one reused worker, not {pids}"
    tags = ("alpha", "bravo", "charlie")
    ids = [r.task_id().hex() for r in refs]
    ranges, infos = [], []
    for tag, task_id in zip(tags, ids, strict=True):
        row = _ended(http, task_id)
        info = row["task_log_info"]
        pid = pids.copy().pop()
        assert info["stdout_file"].endswith(f"-{pid}.out"), info
        assert info["stderr_file"].endswith(f"-{pid}.err"), info
        want_out = f"{tag} line one\n{tag} line two\n"
        assert info["stdout_end"] - info["stdout_start"] == len(want_out), info
        assert info["stderr_end"] - info["stderr_start"] == len(f"{tag} on stderr\n"), info
        ranges.append(info["stdout_start"])
        infos.append(info)
        log = http.get(f"/api/tasks/{task_id}/log", params={"stream": "out"}).json()
        assert log["text"] == want_out, log
        err = http.get(f"/api/tasks/{task_id}/log", params={"stream": "err"}).json()
        assert err["text"].startswith(f"{tag} on stderr\n"), err
        # Ray's state row carries the same offsets.
        v0 = http.get(
            "/api/v0/tasks",
            params={
                "filter_keys": "task_id",
                "filter_predicates": "=",
                "filter_values": task_id,
                "detail": "1",
            },
        ).json()
        rows = v0["data"]["result"]["result"]
        assert rows and rows[0]["task_log_info"] == info, rows
    assert ranges == sorted(ranges) and len(set(ranges)) == 3, ranges

    from ember.util.state import get_log

    base = str(http.base_url).rstrip("/")  # named: other clusters may run on this machine
    lines = list(get_log(address=base, task_id=ids[1]))
    assert "".join(lines) == "bravo line one\nbravo line two\n", lines
    cli = subprocess.run(
        [sys.executable, "-m", "ember.cli.main", "logs", "--task-id", ids[2], "--address", base],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert cli.returncode == 0, cli.stderr
    assert cli.stdout == "charlie line one\ncharlie line two\n", cli.stdout
    err = subprocess.run(
        [
            sys.executable,
            "-m",
            "ember.cli.main",
            "logs",
            "--task-id",
            ids[2],
            "--err",
            "--address",
            base,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert err.returncode == 0 and err.stdout.startswith("charlie on stderr\n"), err
    # Ray's get_log(task_id=...) asks /api/v0/logs/file with these fields (its client itself
    # finds the dashboard through Ray's GCS, which Ember does not speak: the query is Ray's).
    ray_query = {
        "timeout": 30,
        "media_type": "file",
        "download_filename": "file.txt",
        "task_id": ids[0],
        "attempt_number": 0,
        "lines": -1,
        "suffix": "out",
    }
    raw = http.get("/api/v0/logs/file", params=ray_query)
    assert raw.status_code == 200 and raw.content == b"alpha line one\nalpha line two\n", raw.text
    # Ray 2.60's own `ray get tasks ID` reads the same offsets from Ember's state API.
    ray_python = require_ray_python()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EMBER_", "RAY_"))}
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    got = subprocess.run(
        [str(ray_python), "-m", "ray.scripts.scripts", "get", "tasks", ids[2], "--address", base],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert got.returncode == 0, got.stderr[-2000:]
    (row,) = yaml.safe_load(got.stdout)
    assert row["task_log_info"] == infos[2], got.stdout
    missing = http.get("/api/v0/logs/file", params={**ray_query, "task_id": "ab" * 16})
    assert missing.status_code == 404 and "ember list tasks" in missing.text, missing.text


@ember.remote(num_cpus=2)
def talk_then_wait(gate: str) -> None:
    import os
    import time

    print("still going: one")
    while not os.path.exists(gate):
        time.sleep(0.02)


@ember.remote(num_cpus=2, max_retries=0)
def talk_then_die() -> None:
    import os
    import time

    print("last words", flush=True)
    time.sleep(1.5)  # its worker sends its RUNNING event (where its lines start) meanwhile
    os._exit(1)


def test_a_running_task_and_a_killed_one_show_their_lines(live, tmp_path):
    _, http, _ = live
    gate = tmp_path / "gate"
    ref = talk_then_wait.remote(str(gate))
    task_id = ref.task_id().hex()

    def so_far() -> dict | None:
        r = http.get(f"/api/tasks/{task_id}/log")
        body = r.json() if r.status_code == 200 else {}
        return body if body.get("text") == "still going: one\n" else None

    body = wait_until(so_far, 30, 0.1, "the running task's lines so far")
    assert body["end"] is None and body.get("open_ended"), body
    gate.touch()
    ember.get(ref)
    dead = talk_then_die.remote()
    with pytest.raises(Exception):  # noqa: B017 - its worker dies under it
        ember.get(dead, timeout=60)
    dead_id = dead.task_id().hex()

    def last_words() -> dict | None:
        row = http.get(f"/api/tasks/{dead_id}").json()
        if row.get("state") != "FAILED":
            return None
        return http.get(f"/api/tasks/{dead_id}/log").json()

    body = wait_until(last_words, 30, 0.2, "the killed task's lines")
    assert body.get("text") == "last words\n", body
