"""Every attempt where it really ran (issue 28, items 3 and 4), read as a user reads it.

One two-node cluster: a named task with retries runs on the worker node when that node's
raylet (and with it its workers) is SIGKILLed, and runs again on the head; an actor with
``max_restarts`` is restarted on the head, and its call that was running retried there; a
head worker that ran one task is reused for a second, named, one. Each attempt's node id,
worker pid and attempt number are then read from the dashboard's ``/api/tasks``, ``ember
list tasks``, Ray 2.60's ``ray list tasks`` and the timeline's trace, and the second task's
name from the workers API and ``ember stack`` while it runs. The truth is what the tasks
themselves wrote down (their pid and ``get_node_id()``), not what the dashboard says.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import ember
import httpx
import pytest
from ember.cluster_utils import Cluster
from ember.util.scheduling_strategies import NodeAffinitySchedulingStrategy
from ember_test_utils import ember_cli, history_server, require_ray_python, wait_until

LANE_STRIDE = 1 << 22  # ember.trace.writer: a lane's thread id is pid + lane * stride
# The worker node is declared dead 2 s after its raylet goes (tests/cluster/conftest.py's).
FAST_DEATH = {"EMBER_HEARTBEAT_INTERVAL": "0.2", "EMBER_NODE_DEATH_TIMEOUT": "2"}


def _mark_and_maybe_hold(marks: str, hold_s: float) -> tuple[int, str]:
    """Writes down where this attempt runs; the first attempt then holds (it is killed)."""
    first = not os.listdir(marks)
    node = ember.get_runtime_context().get_node_id()
    with open(os.path.join(marks, str(os.getpid())), "w") as f:
        f.write(node)
    if first:
        time.sleep(hold_s)
    return os.getpid(), node


@ember.remote
def slow(marks: str) -> tuple[int, str]:
    return _mark_and_maybe_hold(marks, 120)


@ember.remote(max_restarts=1, max_task_retries=1, num_cpus=0)
class Keeper:
    def where(self) -> tuple[int, str]:
        return os.getpid(), ember.get_runtime_context().get_node_id()

    def hold(self, marks: str) -> tuple[int, str]:
        return _mark_and_maybe_hold(marks, 120)


@ember.remote
def first_job() -> int:
    return os.getpid()


@ember.remote
def second_job(marks: str, stop: str) -> int:
    with open(os.path.join(marks, str(os.getpid())), "w") as f:
        f.write("running")
    deadline = time.monotonic() + 600  # the stop file ends it; this bounds a lost test
    while not os.path.exists(stop) and time.monotonic() < deadline:
        time.sleep(0.05)
    return os.getpid()


def _marks(path: str) -> dict[int, str]:
    out = {}
    for name in os.listdir(path):
        with open(os.path.join(path, name)) as f:
            out[int(name)] = f.read()
    return out


@pytest.fixture(scope="module")
def scene():
    if ember.is_initialized():
        ember.shutdown()
    root = tempfile.mkdtemp(prefix="ember-attempts-", dir="/tmp")  # short: socket paths
    nodes = os.path.join(root, "nodes")  # kept after the cluster: its history is read there
    cluster = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 2}, env=FAST_DEATH, temp_root=nodes
    )
    head_dir = cluster.head_node.temp_dir
    stopped = []

    def stop() -> None:
        if not stopped:
            open(stop_file, "w").close()
            ember.get(second, timeout=60)
            cluster.shutdown()
            stopped.append(True)

    try:
        worker = cluster.add_node(num_cpus=1)
        cluster.connect()
        head_hex, worker_hex = cluster.head_node.node_id.hex(), worker.node_id.hex()
        there = NodeAffinitySchedulingStrategy(worker_hex, soft=True)
        task_marks, actor_marks, reuse_marks = (os.path.join(root, d) for d in "tar")
        for d in (task_marks, actor_marks, reuse_marks):
            os.mkdir(d)
        keeper = Keeper.options(scheduling_strategy=there).remote()
        old_actor = ember.get(keeper.where.remote(), timeout=60)
        assert old_actor[1] == worker_hex
        held = keeper.hold.remote(actor_marks)
        ref = slow.options(name="slow-retry", max_retries=2, scheduling_strategy=there).remote(
            task_marks
        )
        wait_until(lambda: _marks(task_marks) and _marks(actor_marks), 60, message="both run")
        first_task = _marks(task_marks)
        first_call = _marks(actor_marks)
        cluster.remove_node(worker, allow_graceful=False)  # its raylet SIGKILLed, and all
        retried = ember.get(ref, timeout=90)
        recalled = ember.get(held, timeout=90)
        new_actor = ember.get(keeper.where.remote(), timeout=60)
        # A head worker that ran one task is reused for a second, named one.
        pid_first = ember.get(first_job.options(name="first-job").remote(), timeout=60)
        stop_file = os.path.join(root, "stop")
        second = second_job.options(name="second-job").remote(reuse_marks, stop_file)
        wait_until(lambda: _marks(reuse_marks), 60, message="second-job to start")
        yield {
            "url": cluster.head_node.dashboard_url,
            "head": head_hex,
            "worker": worker_hex,
            "task_id": ref.task_id().hex(),
            "task": [(pid, node) for pid, node in first_task.items()] + [retried],
            "call_id": held.task_id().hex(),
            "call": [(pid, node) for pid, node in first_call.items()] + [recalled],
            "actor_id": keeper._actor_id.hex(),
            "actor": [old_actor, new_actor],
            "reuse": (pid_first, next(iter(_marks(reuse_marks)))),
            "stop": stop,
            "head_dir": head_dir,
        }
        stop()
    finally:
        ember.shutdown()
        cluster.shutdown()
        shutil.rmtree(root, ignore_errors=True)


def _expected(attempts: list[tuple[int, str]]) -> list[tuple[int, str, int]]:
    """(attempt number, node id, worker pid) of each attempt, from what the tasks wrote."""
    return [(n, node, pid) for n, (pid, node) in enumerate(attempts)]


def _api_rows(url: str, task_id: str) -> list[dict]:
    items = httpx.get(f"{url}/api/tasks", params={"filter": f"task_id={task_id}"}).json()["items"]
    return sorted(items, key=lambda r: r["attempt"])


def _ember_list(url: str, resource: str, where: str) -> list[dict]:
    """``ember list RESOURCE --filter WHERE`` as JSON, as a user runs it."""
    argv = [ember_cli(), "list", resource, "--address", url, "--filter", where]
    out = subprocess.run([*argv, "--format", "json"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def _settled(url: str, task_id: str, n: int) -> list[dict]:
    """The task's attempt rows once all ``n`` have ended (the events arrive within ~1 s)."""
    rows = _api_rows(url, task_id)
    ended = [r for r in rows if r["state"] in ("FINISHED", "FAILED")]
    return rows if len(ended) == n else []


@pytest.mark.parametrize("which", ["task", "call"])
def test_dashboard_api_has_a_row_per_attempt_where_it_ran(scene, which):
    url, task_id = scene["url"], scene[f"{which}_id"]
    want = _expected(scene[which])
    assert [w[1] for w in want] == [scene["worker"], scene["head"]]
    rows = wait_until(lambda: _settled(url, task_id, 2), 30, message="both attempts ended")
    assert [(r["attempt"], r["node_id"], r["pid"]) for r in rows] == want, rows
    assert [r["state"] for r in rows] == ["FAILED", "FINISHED"]
    assert rows[0]["error"] and rows[1]["error"] is None
    assert (
        rows[0]["name"] == rows[1]["name"] == ("slow-retry" if which == "task" else "Keeper.hold")
    )
    detail = httpx.get(f"{url}/api/tasks/{task_id}").json()
    assert detail["attempt"] == 1 and detail["node_id"] == scene["head"]
    assert [(a["attempt"], a["node_id"], a["pid"]) for a in detail["attempts"]] == want
    first = httpx.get(f"{url}/api/tasks/{task_id}", params={"attempt": 0}).json()
    assert (first["state"], first["node_id"], first["pid"]) == ("FAILED", want[0][1], want[0][2])


def test_ember_list_tasks_shows_each_attempt(scene):
    url, task_id = scene["url"], scene["task_id"]
    wait_until(lambda: _settled(url, task_id, 2), 30, message="both attempts ended")
    rows = _ember_list(url, "tasks", f"task_id={task_id}")
    rows.sort(key=lambda r: r["attempt_number"])
    got = [(r["attempt_number"], r["node_id"], r["worker_pid"]) for r in rows]
    assert got == _expected(scene["task"])
    assert [r["state"] for r in rows] == ["FAILED", "FINISHED"]


def test_ray_list_tasks_and_actors_show_each_attempt_and_the_live_incarnation(scene):
    ray = require_ray_python().parent / "ray"
    url, task_id = scene["url"], scene["task_id"]
    wait_until(lambda: _settled(url, task_id, 2), 30, message="both attempts ended")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EMBER_", "RAY_"))}
    env["RAY_USAGE_STATS_ENABLED"] = "0"

    def ray_list(resource: str, where: str) -> list[dict]:
        argv = [str(ray), "list", resource, "--address", url, "--filter", where, "--detail"]
        out = subprocess.run(
            [*argv, "--format", "json"], capture_output=True, text=True, timeout=90, env=env
        )
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    for call_id, attempts in ((task_id, scene["task"]), (scene["call_id"], scene["call"])):
        rows = sorted(ray_list("tasks", f"task_id={call_id}"), key=lambda r: r["attempt_number"])
        got = [(r["attempt_number"], r["node_id"], r["worker_pid"]) for r in rows]
        assert got == _expected(attempts)
        assert [r["state"] for r in rows] == ["FAILED", "FINISHED"]
    [actor] = ray_list("actors", f"actor_id={scene['actor_id']}")
    new_pid, new_node = scene["actor"][1]
    assert (actor["node_id"], actor["pid"], actor["num_restarts"]) == (new_node, new_pid, 1)


def test_timeline_draws_each_attempt_on_its_node_and_worker(scene):
    url = scene["url"]
    for which in ("task", "call"):
        wait_until(lambda w=which: _settled(url, scene[f"{w}_id"], 2), 30, message="ended")
    trace = httpx.get(f"{url}/api/timeline", timeout=60).json()
    labels = {e["pid"]: e["args"]["name"] for e in trace if e.get("name") == "process_name"}
    for which in ("task", "call"):
        slices = [
            e
            for e in trace
            if e.get("cat", "").startswith("task::")
            and e.get("args", {}).get("task_id") == scene[f"{which}_id"]
        ]
        slices.sort(key=lambda e: e["args"].get("attempt", 0))
        got = [
            (e["args"].get("attempt", 0), labels[e["pid"]].split()[-1], e["tid"] % LANE_STRIDE)
            for e in slices
        ]
        want = [(n, node[:8], pid) for n, node, pid in _expected(scene[which])]
        assert got == want, slices
        assert [e["args"]["state"] for e in slices] == ["FAILED", "FINISHED"]


def test_restarted_actor_is_on_its_new_node_and_lists_its_first_life(scene):
    url, actor_id = scene["url"], scene["actor_id"]
    (old_pid, old_node), (new_pid, new_node) = scene["actor"]
    assert (old_node, new_node) == (scene["worker"], scene["head"])
    row = httpx.get(f"{url}/api/actors/{actor_id}").json()
    assert (row["state"], row["node_id"], row["pid"], row["num_restarts"]) == (
        "ALIVE",
        new_node,
        new_pid,
        1,
    )
    # Its calls: where() twice and hold() once (run twice: its first run died with the node).
    assert (row["executed_calls"], row["pending_calls"]) == (3, 0)
    [life] = row["incarnations"]
    assert (life["node_id"], life["pid"]) == (old_node, old_pid)
    assert life["end_time"] >= life["start_time"] and life["death_cause"]
    [listed] = _ember_list(url, "actors", f"actor_id={actor_id}")
    assert (listed["node_id"], listed["pid"]) == (new_node, new_pid)
    # The constructor's second run is the creation task's attempt 1, on the head.
    creation = [
        r
        for r in httpx.get(
            f"{url}/api/tasks", params={"filter": f"actor_id={actor_id}", "limit": 100}
        ).json()["items"]
        if r["type"] == "ACTOR_CREATION_TASK"
    ]
    by_attempt = {r["attempt"]: (r["node_id"], r["pid"]) for r in creation}
    assert by_attempt == {0: (old_node, old_pid), 1: (new_node, new_pid)}


def test_a_reused_worker_names_the_task_it_runs_now(scene):
    url = scene["url"]
    pid_first, pid_second = scene["reuse"]
    assert pid_first == pid_second, "the head worker was not reused (the scene is wrong)"

    def current() -> str | None:
        rows = httpx.get(f"{url}/api/workers", params={"filter": f"pid={pid_second}"}).json()
        items = rows["items"]
        return items[0]["current_task"] if items else None

    assert wait_until(lambda: current() == "second-job" and current(), 30) == "second-job"
    out = subprocess.run(
        [ember_cli(), "stack", "--address", url, "--pid", str(pid_second)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    head = next(line for line in out.stdout.splitlines() if line.startswith("--- "))
    assert head.endswith(" running second-job ---"), out.stdout


def test_the_pages_show_each_attempt_the_actor_and_the_running_task(scene):
    """The Tasks page's attempts (a row each; the detail lists them, and picking one shows
    where it ran), the Actors page's earlier incarnation, the Machines page's current task."""
    frontend = Path(__file__).parents[1] / "frontend"
    sys.path.insert(0, str(frontend))
    from browser_utils import CHROMIUM, CHROMIUM_FLAGS, open_page

    # The browser tests' own check (skip here, fail in CI), by path: "conftest" is this
    # folder's module.
    spec = importlib.util.spec_from_file_location("frontend_conftest", frontend / "conftest.py")
    setup = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(setup)
    setup.check_browser_setup()
    from playwright.sync_api import expect, sync_playwright

    url, task_id = scene["url"], scene["task_id"]
    (pid0, node0), (pid1, node1) = scene["task"]
    wait_until(lambda: _settled(url, task_id, 2), 30, message="both attempts ended")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page()
            open_page(page, url, f"tasks?name=slow-retry&sel={task_id}")
            rows = page.locator("[data-testid=tasks-table] .vrow")
            expect(rows).to_have_count(2)
            first = page.locator(f"[data-testid=tasks-table] .vrow[data-row-key='{task_id}']")
            retry = page.locator(f"[data-testid=tasks-table] .vrow[data-row-key='{task_id}:1']")
            for row, node, pid in ((first, node0, pid0), (retry, node1, pid1)):
                expect(row.locator("[data-col=node_id]")).to_have_text(node[:8])
                expect(row.locator("[data-col=pid]")).to_have_text(str(pid))
            attempts = page.locator("[data-testid=task-attempt]")
            expect(attempts).to_have_count(2)
            for i, (node, pid) in enumerate(((node0, pid0), (node1, pid1))):
                cells = attempts.nth(i).locator("td")
                expect(cells.nth(0)).to_have_text(str(i))
                expect(cells.nth(2)).to_have_text(node[:12])
                expect(cells.nth(3)).to_have_text(str(pid))
            attempts.nth(0).click()  # the first attempt: FAILED, where it ran
            detail = page.locator("[data-testid=task-detail]")
            expect(detail.locator("h2 .state").first).to_have_text("FAILED")
            expect(detail).to_contain_text(f"{node0[:12]} / {pid0}")
            assert page.url.endswith(f"sel={task_id}%3A0") or page.url.endswith(f"sel={task_id}:0")

            (old_pid, old_node), _ = scene["actor"]
            open_page(page, url, f"actors?sel={scene['actor_id']}")
            life = page.locator("[data-testid=actor-incarnation] td")
            expect(life.nth(0)).to_have_text(old_node[:12])
            expect(life.nth(1)).to_have_text(str(old_pid))

            pid = scene["reuse"][1]
            open_page(page, url, f"machines?node={scene['head']}")
            worker = page.locator(f"[data-testid=workers-table] tbody tr[data-row-key='{pid}']")
            expect(worker.locator("td[data-col=state]")).to_have_text("running second-job")
        finally:
            browser.close()


def test_history_keeps_each_attempt_after_the_cluster_is_gone(scene):
    for which in ("task", "call"):  # everything ended before the cluster stops
        wait_until(lambda w=which: _settled(scene["url"], scene[f"{w}_id"], 2), 30)
    scene["stop"]()
    with history_server(scene["head_dir"]) as (url, _):
        for which in ("task", "call"):
            rows = _api_rows(url, scene[f"{which}_id"])
            got = [(r["attempt"], r["node_id"], r["pid"]) for r in rows]
            assert got == _expected(scene[which])
            assert [r["state"] for r in rows] == ["FAILED", "FINISHED"]
        actor = httpx.get(f"{url}/api/actors/{scene['actor_id']}").json()
        (old_pid, old_node), (new_pid, new_node) = scene["actor"]
        assert (actor["node_id"], actor["pid"], actor["num_restarts"]) == (new_node, new_pid, 1)
        assert [(i["node_id"], i["pid"]) for i in actor["incarnations"]] == [(old_node, old_pid)]
