"""The timeline (issue 4 §4): ``ember.timeline()`` through the dashboard, loaded in a real
viewer (speedscope in chromium); its layout, arrows and filters; and a trace of many tasks
streamed in bounded memory."""

from __future__ import annotations

import asyncio
import io
import json
import os
import time
import tracemalloc
import urllib.error
import urllib.request
import warnings
from types import SimpleNamespace

import ember
import pytest
from ember.trace import store as tls
from ember.trace import writer as tl
from ember_test_utils import wait_until
from speedscope_viewer import import_in_speedscope, require_viewer, stacks_of

pytestmark = pytest.mark.timeout(240)


@ember.remote
def leaf(x):
    time.sleep(0.02)
    return x + 1


@ember.remote
def parent(n):
    with ember.profile("inner work", extra_data={"step": "setup"}):
        time.sleep(0.02)
    return sum(ember.get([leaf.remote(i) for i in range(n)]))


def _run_workload() -> None:
    produced = leaf.remote(1)
    assert ember.get([parent.remote(3), leaf.remote(produced)]) == [6, 3]


def _trace_with(path, n_tasks: int, spans: int = 1) -> list[dict]:
    """Polls ember.timeline(filename) until the dashboard has every task (agents flush
    task events about once a second)."""

    def complete() -> list[dict] | None:
        ember.timeline(filename=str(path))
        events = json.loads(path.read_text())
        info = events[-1]["args"]
        return events if info["tasks"] >= n_tasks and info["spans"] >= spans else None

    return wait_until(complete, timeout=30, interval=0.3, message=f"{n_tasks} tasks in the trace")


def test_cluster_timeline_layout_and_arrows(ember_start, tmp_path):
    ctx = ember_start(num_cpus=2)
    assert ctx.dashboard_url
    _run_workload()
    events = _trace_with(tmp_path / "trace.json", 6)

    processes = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    threads = {
        (e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"
    }
    tasks = [e for e in events if tl.is_task_slice(e)]
    assert len(processes) == 1 and "127.0.0.1" in next(iter(processes.values()))
    assert sorted(t["name"].rsplit(".", 1)[-1] for t in tasks) == ["leaf"] * 5 + ["parent"]
    assert {threads[(t["pid"], t["tid"])] for t in tasks} == {f"worker:{t['tid']}" for t in tasks}
    # Each task's phases nest inside its slice, on its thread, in order.
    for t in tasks:
        phases = [
            e
            for e in events
            if e["ph"] == "X"
            and e["cat"] in tl.PHASE_CATS
            and (e["pid"], e["tid"]) == (t["pid"], t["tid"])
            and t["ts"] <= e["ts"] <= t["ts"] + t["dur"]
        ]
        names = [p["name"] for p in sorted(phases, key=lambda p: p["ts"])]
        assert names[:1] == ["task:deserialize_arguments"] and "task:execute" in names, names
        for p in phases:
            assert p["ts"] + p["dur"] <= t["ts"] + t["dur"]
    # The wait for resources: one async slice per task.
    waits = [e for e in events if e["ph"] == "b" and e["name"] == "task:wait_for_resources"]
    assert len(waits) == 6
    # Arrows: the driver submitted 3 tasks, parent submitted 3 leaves; one object passed.
    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    ends = {e["id"]: e for e in events if e["ph"] == "f"}
    assert starts.keys() == ends.keys()
    submitted = [i for i, e in starts.items() if e["name"] == "submitted"]
    parent_slice = next(t for t in tasks if t["name"].endswith("parent"))
    from_parent = [
        i
        for i in submitted
        if (starts[i]["pid"], starts[i]["tid"]) == (parent_slice["pid"], parent_slice["tid"])
    ]
    from_driver = [i for i in submitted if starts[i]["tid"] == os.getpid()]
    assert len(from_parent) == 3 and len(from_driver) == 3
    assert threads[(starts[from_driver[0]]["pid"], os.getpid())] == f"driver:{os.getpid()}"
    objects = [i for i, e in starts.items() if e["name"] == "object"]
    assert len(objects) == 1
    src, dst = starts[objects[0]], ends[objects[0]]
    assert src["ts"] <= dst["ts"]
    # The profile span sits on the parent's worker thread, inside its slice.
    span = next(e for e in events if e["ph"] == "X" and e["name"] == "inner work")
    assert (span["pid"], span["tid"]) == (parent_slice["pid"], parent_slice["tid"])
    assert span["args"] == {"step": "setup"}
    assert parent_slice["ts"] <= span["ts"] <= parent_slice["ts"] + parent_slice["dur"]


def test_speedscope_imports_the_trace(ember_start, tmp_path):
    require_viewer()
    ember_start(num_cpus=2)
    _run_workload()
    trace = tmp_path / "trace.json"
    events = _trace_with(trace, 6)
    workers = {e["tid"] for e in events if tl.is_task_slice(e)}

    result = import_in_speedscope(trace, tmp_path)
    assert not result["dialogs"], result["dialogs"]  # "Unrecognized format" is an alert
    assert "Importing as Trace Event Format profile" in result["console"]
    # speedscope warns on the console when slices do not nest ("Tried to end ...").
    assert not [
        line for line in result["console"] if "Tried to end" in line or "still open" in line
    ]
    export = result["export"]
    frames = export["shared"]["frames"]
    names = {p["name"]: p for p in export["profiles"]}
    # A profile per worker thread, named after the trace's process and thread names.
    for tid in workers:
        assert any(f"worker:{tid}" in n for n in names), (tid, list(names))
    stacks = [s for p in export["profiles"] for s in stacks_of(p, frames)]
    leaf_phases = [s for s in stacks if len(s) == 2 and _fn(s[0]) == "leaf"]
    assert {s[1].split(" ")[0] for s in leaf_phases} >= {
        "task:deserialize_arguments",
        "task:execute",
        "task:store_outputs",
    }
    # The profile span nests inside parent's "execute" phase.
    assert any(_fn(s[0]) == "parent" and s[-1].startswith("inner work") for s in stacks), stacks


def _fn(frame: str) -> str:
    """A task frame's function name: speedscope names frames "<name> <args json>"."""
    return frame.split(" ", 1)[0].rsplit(".", 1)[-1]


def test_timeline_endpoint_filters_and_errors(ember_start):
    ctx = ember_start(num_cpus=1)
    assert ember.get(leaf.remote(0)) == 1
    url = ctx.dashboard_url + "/api/timeline"

    def get(query: str) -> list[dict]:
        with urllib.request.urlopen(url + query, timeout=30) as resp:
            assert resp.headers["Content-Type"].startswith("application/json")
            return json.loads(resp.read())

    wait_until(lambda: get("")[-1]["args"]["tasks"] >= 1, timeout=30, interval=0.3)
    assert get("?job_id=ffffffff")[-1]["args"]["tasks"] == 0
    assert get(f"?node_id={ctx.node_id}")[-1]["args"]["tasks"] >= 1
    assert get(f"?since={time.time() + 3600}")[-1]["args"]["tasks"] == 0
    assert get("?last_seconds=600")[-1]["args"]["tasks"] >= 1
    with pytest.raises(urllib.error.HTTPError) as err:
        get("?node_id=nosuchnode")
    assert err.value.code == 404 and "nosuchnode" in err.value.read().decode()
    with pytest.raises(urllib.error.HTTPError) as err:
        get("?since=yesterday")
    assert err.value.code == 422 and "since" in err.value.read().decode()


def _records(n: int):
    """n synthetic finished tasks on 4 nodes x 8 workers, each consuming its predecessor's
    object: what a million-task cluster's table holds, made on the fly."""
    t0 = 1_800_000_000.0
    for i in range(n):
        t = t0 + i * 1e-3
        yield SimpleNamespace(
            task_id=f"{i:032x}",
            name=f"mod.f{i % 7}",
            state="FINISHED",
            job_id="01",
            node_id=f"node{i % 4}",
            pid=1000 + i % 32,
            attempt=0,
            t_pending=t,
            t_scheduled=t + 1e-4,
            t_start=t + 2e-4,
            t_args=t + 3e-4,
            t_executed=t + 8e-4,
            t_end=t + 9e-4,
        )


def _store(n: int) -> tls.TimelineStore:
    store = tls.TimelineStore()
    for i in range(1, min(n, tls.MAX_FLOW_RECORDS)):
        store.add_flow(f"{i:032x}", f"{i - 1:032x}", "node0", 999, [f"{i - 1:032x}"])
    return store


class _Counting(io.TextIOBase):
    def __init__(self) -> None:
        self.chars = 0

    def write(self, s: str) -> int:
        self.chars += len(s)
        return len(s)


def _peak_bytes(n: int, store: tls.TimelineStore) -> tuple[int, int]:
    out = _Counting()
    tracemalloc.start()
    try:
        tl.write(out, _records(n), store=store)
        return tracemalloc.get_traced_memory()[1], out.chars
    finally:
        tracemalloc.stop()


def test_a_large_trace_streams_in_bounded_memory(tmp_path, monkeypatch):
    # Valid JSON a viewer can parse, with every task and arrow, for a small run ...
    path = tmp_path / "small.json"
    with open(path, "w") as f:
        tl.write(f, _records(2_000), store=_store(2_000))
    events = json.loads(path.read_text())
    assert events[-1]["args"]["tasks"] == 2_000
    assert events[-1]["args"]["flows"] == 2 * 1_999
    # ... and the writer's memory does not grow with the number of tasks (10x more tasks,
    # the same peak within noise): the trace goes out as it is made. Its one table, the
    # window of recent task locations for object arrows, is made small here so that both
    # runs pass its bound (tests/diagnostics/bench_timeline_export.py measures a million with the default).
    monkeypatch.setattr(tl, "FLOW_WINDOW", 1_000)
    store = tls.TimelineStore()
    small_peak, small_chars = _peak_bytes(5_000, store)
    big_peak, big_chars = _peak_bytes(50_000, store)
    assert big_chars > 9 * small_chars
    assert big_peak < 2 * small_peak + 1_000_000, (small_peak, big_peak)


def test_object_transfers_from_the_agents_reach_the_trace():
    """The agent ships its raylet's pulls in its metrics message; the hub hands them to the
    timeline, which draws each as an async slice on the receiving node (pulls overlap)."""
    import asyncio

    from ember.dashboard.agent_hub import AgentHub, AgentLink
    from ember.dashboard.state import DashboardState

    state = DashboardState()
    hub = AgentHub(state)
    link = asyncio.run(_make_link(AgentLink, "bb" * 14))
    now = time.time()
    transfers = [
        {
            "object_id": f"{i:040x}",
            "from_node": "aa" * 14,
            "to_node": "bb" * 14,
            "size": 8 * 2**20,
            "start": now + i * 0.01,
            "end": now + 0.05 + i * 0.01,
        }
        for i in range(3)
    ]
    hub.ingest(link, {"type": "metrics", "time": now, "sample": {}, "transfers": transfers})
    out = io.StringIO()
    tl.write(out, [], store=state.timeline)
    events = json.loads(out.getvalue())
    begins = [e for e in events if e["ph"] == "b" and e["cat"] == "transfer"]
    assert len(begins) == 3 and events[-1]["args"]["transfers"] == 3
    assert begins[0]["name"] == "object transfer 8.0 MiB from aaaaaaaa"
    # Filtering by node keeps transfers into or out of it.
    out = io.StringIO()
    tl.write(out, [], store=state.timeline, filters=tls.Filters(node_id="cc" * 14))
    assert json.loads(out.getvalue())[-1]["args"]["transfers"] == 0


async def _make_link(cls, node_id):
    return cls(node_id)  # its queue wants a running loop


@ember.remote(max_concurrency=3)
class Sleeper:
    def nap(self, seconds):
        time.sleep(seconds)
        return seconds


def test_concurrent_actor_calls_get_their_own_rows(ember_start, tmp_path):
    """A threaded actor runs calls at once on one process: each overlapping call goes to its
    own thread row, so every row's slices nest (a viewer cannot draw overlaps on one row)."""
    ember_start(num_cpus=2)
    sleeper = Sleeper.remote()
    assert ember.get([sleeper.nap.remote(0.3) for _ in range(3)]) == [0.3] * 3
    events = _trace_with(tmp_path / "trace.json", 3, spans=0)
    naps = [
        e for e in events if e.get("cat", "").startswith("task::") and e["name"].endswith("nap")
    ]
    assert len(naps) == 3
    assert len({e["tid"] for e in naps}) == 3  # they overlapped: three rows
    names = {e["tid"]: e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert sum("(concurrent" in names[e["tid"]] for e in naps) == 2
    by_row: dict[tuple, list] = {}
    for e in events:
        if tl.is_task_slice(e):
            by_row.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    for row in by_row.values():
        row.sort()
        assert all(a[1] <= b[0] for a, b in zip(row, row[1:], strict=False)), row


def test_without_a_dashboard_the_driver_traces_its_own_tasks(ember_start):
    ctx = ember_start(num_cpus=2, include_dashboard=False)
    assert not ctx.dashboard_url
    _run_workload()
    events = ember.timeline()  # no polling: the driver's own buffer is complete at once
    tasks = [e for e in events if e.get("cat", "").startswith("task::")]
    # The driver's three tasks; parent's three leaves are owned (and traced) by its worker.
    assert sorted(t["name"].rsplit(".", 1)[-1] for t in tasks) == ["leaf", "leaf", "parent"]
    assert [e["name"] for e in events if e["ph"] == "s"].count("object") == 1


def test_an_unreachable_dashboard_falls_back_with_a_notice(ember_start, tmp_path):
    ember_start(num_cpus=1)
    assert ember.get(leaf.remote(1)) == 2
    from ember import global_state

    worker = global_state.worker
    saved = worker.node["dashboard_url"]
    worker.node["dashboard_url"] = "http://127.0.0.1:9"  # nothing listens on port 9
    try:
        path = tmp_path / "trace.json"
        with pytest.warns(RuntimeWarning, match="did not answer") as caught:
            assert ember.timeline(filename=str(path)) is None
    finally:
        worker.node["dashboard_url"] = saved
    assert "127.0.0.1:9" in str(caught[0].message)
    assert caught[0].filename == __file__  # points at the caller's line
    events = json.loads(path.read_text())
    assert [
        e["name"].rsplit(".", 1)[-1] for e in events if e.get("cat", "").startswith("task::")
    ] == ["leaf"]


# -- the dashboard's export: bounded memory, time windows, evictions (issue 4 §4, §5) ----------


def _ingest(state, n: int, t0: float = 1_800_000_000.0, step: float = 1e-3) -> None:
    """n finished tasks through the agents' ingestion call, 5,000 events a batch, each with
    its parent and an object argument (so the trace has arrows, as a real one does)."""
    from ember.dashboard.agent_hub import AgentHub, AgentLink

    hub = AgentHub(state)
    link = asyncio.run(_make_link(AgentLink, "ab" * 16))
    hub.ingest(link, {"type": "metrics", "time": t0, "info": {"node_ip": "10.0.0.2"}, "sample": {}})
    for lo in range(0, n, 2_500):
        events = []
        for i in range(lo, min(lo + 2_500, n)):
            t = t0 + i * step
            events.append([f"{i:032x}", "PENDING_ARGS_AVAIL", t, 0, {"name": f"mod.f{i % 7}"}])
            extra = {
                "pid": 1000 + i % 16,
                "node_id": "ab" * 16,
                "timings": {"start": t + 2e-4, "executed": t + 6e-4, "end": t + 8e-4},
                "parent": f"{i - 1:032x}" if i else "",
                "owner_pid": 999,
                "arg_tasks": [f"{i - 1:032x}"] if i else [],
            }
            events.append([f"{i:032x}", "FINISHED", t + 9e-4, 0, extra])
        hub.ingest(
            link, {"type": "task_events", "job_id": "01000000", "events": events, "dropped": 0}
        )


async def _asgi_get(app, path: str, query: str = "") -> tuple[int, int, bytes]:
    """GET through the ASGI app itself, counting the streamed body instead of keeping it (a
    test client would buffer it): (status, bytes, the last 64 KB)."""
    done = asyncio.Event()
    status, size, tail = 0, 0, b""
    sent_request = False

    async def receive() -> dict:
        nonlocal sent_request
        if not sent_request:
            sent_request = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await done.wait()
        return {"type": "http.disconnect"}

    async def send(msg: dict) -> None:
        nonlocal status, size, tail
        if msg["type"] == "http.response.start":
            status = msg["status"]
        elif msg["type"] == "http.response.body":
            body = msg.get("body", b"")
            size += len(body)
            tail = (tail + body)[-65536:]
            if not msg.get("more_body"):
                done.set()

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": query.encode(),
        "headers": [(b"host", b"test")],
        "server": ("test", 80),
        "client": ("127.0.0.1", 5000),
    }
    await app(scope, receive, send)
    return status, size, tail


def _trace_info(tail: bytes) -> dict:
    line = tail.decode().rstrip().rstrip("]").rstrip().splitlines()[-1]
    return json.loads(line.lstrip(","))["args"]


def _export_peak(n: int) -> tuple[int, int, dict]:
    """(tracemalloc peak during one /api/timeline export of n tasks, bytes sent, metadata)."""
    from ember.dashboard.app import DashboardContext, create_app
    from ember.dashboard.state import DashboardState

    state = DashboardState()
    _ingest(state, n)
    app = create_app(DashboardContext(state=state))
    tracemalloc.start()
    try:
        status, size, tail = asyncio.run(_asgi_get(app, "/api/timeline"))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert status == 200
    return peak, size, _trace_info(tail)


def test_the_endpoint_exports_in_flat_memory(monkeypatch):
    # The window of recent task locations (for object arrows) is the export's one table; it
    # has its own cap (EMBER_TIMELINE_FLOW_WINDOW), made small here so both sizes pass it.
    monkeypatch.setattr(tl, "FLOW_WINDOW", 1_000)
    # (tracemalloc slows the export ~9x: 5k and 50k tasks keep the test near 20 s.)
    small_peak, small_bytes, small = _export_peak(5_000)
    big_peak, big_bytes, big = _export_peak(50_000)
    assert (small["tasks"], big["tasks"]) == (5_000, 50_000)
    assert big["flows"] == 50_000 + 49_999  # submitted + object arrows: all there
    assert big_bytes > 9 * small_bytes
    # The table holds 10x more tasks; the export's peak stays where it was (a block of
    # copies and a chunk of text), not 10x (the trace itself is ~45 MB).
    assert big_peak < 1.5 * small_peak + 2_000_000, (small_peak, big_peak)
    assert big_peak < 8_000_000, big_peak


def test_a_window_costs_its_blocks_not_the_table():
    from ember.dashboard.task_table import BLOCK, TaskTable

    table = TaskTable(50_000)
    t0 = 1_000.0
    for i in range(50_000):
        tid = f"{i:032x}"
        table.apply(tid, "PENDING_ARGS_AVAIL", t0 + i, 0, {"name": "f"})
        if i != 10:  # task 10 runs long: submitted early, ends at the very end
            table.apply(tid, "FINISHED", t0 + i + 0.5, 0, {"timings": {"start": t0 + i + 0.1}})
    table.apply(f"{10:032x}", "FINISHED", t0 + 60_000, 0, {"timings": {"start": t0 + 10.1}})

    def brute(since: float | None, until: float | None) -> list[str]:
        out = []
        for slot in reversed(list(table.newest_slots())):
            start, end = table.field(slot, "t_start"), table.field(slot, "t_end")
            if (since is None or end >= since) and (until is None or start <= until):
                out.append(table.field(slot, "task_id"))
        return out

    for since, until in [(None, None), (t0 + 45_000, None), (t0 + 20_000, t0 + 22_000)]:
        scan = table.scan(since=since, until=until)
        assert [r.task_id for r in scan] == brute(since, until)
    scan = table.scan(since=t0 + 49_000)
    got = [r.task_id for r in scan]
    assert got[0] == f"{10:032x}" and len(got) == 1 + 1_000  # the long task is found
    # Its block, plus the one or two holding the last thousand tasks: not all 49.
    assert scan.blocks_read <= 3 and 50_000 // BLOCK > 40


def test_a_scan_skips_slots_reused_while_it_runs():
    from ember.dashboard.task_table import BLOCK, TaskTable

    table = TaskTable(4 * BLOCK)
    for i in range(4 * BLOCK):
        table.apply(f"{i:032x}", "FINISHED", 2.0 + i, 0, {"timings": {"start": 1.0 + i}})
    scan = table.scan()
    it = iter(scan)
    first = next(it)  # the first block is copied now
    for i in range(4 * BLOCK, 6 * BLOCK):  # ingestion between two chunks: 2 blocks reused
        table.apply(f"{i:032x}", "FINISHED", 2.0 + i, 0, {"timings": {"start": 1.0 + i}})
    rest = list(it)
    ids = [first.task_id] + [r.task_id for r in rest]
    # The copied block comes out whole; the overwritten second block is skipped and counted,
    # never read as the newer tasks now in its slots; tasks added since are not in the scan.
    assert ids == [f"{i:032x}" for i in (*range(BLOCK), *range(2 * BLOCK, 4 * BLOCK))]
    assert scan.overwritten == BLOCK and scan.evicted == 2 * BLOCK


def test_evicted_tasks_are_in_the_metadata_and_the_cli_warns(monkeypatch, tmp_path):
    from click.testing import CliRunner
    from ember.cli import timeline as cli_timeline
    from ember.dashboard.app import DashboardContext, create_app
    from ember.dashboard.config import Caps
    from ember.dashboard.state import DashboardState

    state = DashboardState(Caps(max_tasks=1_000))
    _ingest(state, 3_000)
    app = create_app(DashboardContext(state=state))
    status, _, tail = asyncio.run(_asgi_get(app, "/api/timeline"))
    info = _trace_info(tail)
    assert status == 200 and info["tasks"] == 1_000 and info["max_tasks"] == 1_000
    assert info["dropped"]["tasks"] == 2_000 and info["dropped"]["tasks_during_export"] == 0

    class FakeApi:  # the CLI's client, answered by the app above
        def open(self, method, path, params, timeout=None):
            query = "&".join(f"{k}={v}" for k, v in params.items() if v is not None)
            status, _, body = asyncio.run(_asgi_get(app, path, query))
            assert status == 200
            return io.BytesIO(body)  # 3,000 small tasks fit in the tail kept

    monkeypatch.setattr(cli_timeline, "resolve", lambda address: FakeApi())
    monkeypatch.setattr(tl, "FLOW_WINDOW", 10)
    out = tmp_path / "t.json"
    res = CliRunner().invoke(cli_timeline.timeline, ["--output", str(out)])
    assert res.exit_code == 0, res.output
    assert "2,000 older tasks were evicted" in res.stderr
    assert "newest 1,000 tasks" in res.stderr and "EMBER_DASHBOARD_MAX_TASKS" in res.stderr
    assert "older tasks were evicted" not in res.stdout and "(1000 tasks" in res.stdout
    # Nothing evicted: no warning.
    assert cli_timeline.loss_warnings({"dropped": {"tasks": 0, "flows": 0}}) == []


def test_the_endpoint_window_and_prefix(monkeypatch):
    from ember.dashboard.app import DashboardContext, create_app
    from ember.dashboard.state import DashboardState

    state = DashboardState()
    t0 = 1_800_000_000.0
    _ingest(state, 5_000, t0=t0)
    app = create_app(DashboardContext(state=state))
    q = f"since={t0 + 4.0}&until={t0 + 4.5}&node_id={'ab' * 4}"
    status, _, tail = asyncio.run(_asgi_get(app, "/api/timeline", q))
    info = _trace_info(tail)
    # Tasks every ms ending 0.8 ms after they start: those that overlap [4.0, 4.5] s.
    assert status == 200 and info["tasks"] == 500
    assert info["filters"]["node_id"] == "ab" * 16  # the prefix, resolved
    status, _, tail = asyncio.run(_asgi_get(app, "/api/timeline", "node_id=cdcdcdcd"))
    assert status == 404 and b"cdcdcdcd" in tail


def test_the_page_can_leave_out_the_waits_for_resources():
    from ember.dashboard.app import DashboardContext, create_app
    from ember.dashboard.state import DashboardState

    state = DashboardState()
    _ingest(state, 2_000)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from fastapi.testclient import TestClient

    with TestClient(create_app(DashboardContext(state=state))) as c:
        full = c.get("/api/timeline").json()
        lean = c.get("/api/timeline", params={"waits": "false"}).json()
    waits = [e for e in full if e.get("cat") == "scheduling"]
    assert len(waits) == 2 * 2_000  # a begin and an end per task
    assert not [e for e in lean if e.get("cat") == "scheduling"]
    # Everything else is the same: the tasks and their phases.
    assert len(lean) == len(full) - len(waits)
    assert lean[-1]["args"]["tasks"] == full[-1]["args"]["tasks"] == 2_000


def test_timeline_sends_the_cluster_token(tmp_path, monkeypatch):
    """A cluster whose dashboard listens off loopback wants the cluster token: the driver's
    ember.timeline() sends it (no 401, no fallback); a wrong one falls back, saying why."""
    from ember_test_utils import head_cluster

    extra = ("--dashboard-host", "0.0.0.0", "--dashboard-port", "0")
    with head_cluster(*extra, prefix="emb-tl-") as (root, port, _):
        ctx = ember.init(address=f"127.0.0.1:{port}", temp_dir=root)
        try:
            with pytest.raises(urllib.error.HTTPError) as err:  # the dashboard wants a token
                urllib.request.urlopen(ctx.dashboard_url + "/api/version", timeout=10)
            assert err.value.code == 401
            assert ember.get(leaf.remote(1)) == 2

            def traced() -> list | None:
                with warnings.catch_warnings():
                    warnings.simplefilter("error")  # a fallback warning fails the test
                    events = ember.timeline()
                return events if events[-1]["args"]["tasks"] >= 1 else None

            events = wait_until(traced, timeout=30, interval=0.3, message="the task in the trace")
            assert [
                e["name"].rsplit(".", 1)[-1]
                for e in events
                if e.get("cat", "").startswith("task::")
            ] == ["leaf"]
            monkeypatch.setenv("EMBER_TOKEN", "wrong")
            with pytest.warns(RuntimeWarning, match="HTTP 401") as caught:
                events = ember.timeline()
            assert "cluster token" in str(caught[0].message)  # the dashboard's own words
            assert "only this driver's own tasks" in str(caught[0].message)
            assert [
                e for e in events if e.get("cat", "").startswith("task::")
            ]  # the driver's own leaf
        finally:
            ember.shutdown()


def test_timeline_warns_when_the_dashboard_evicted_tasks(ember_start, monkeypatch, tmp_path):
    monkeypatch.setenv("EMBER_DASHBOARD_MAX_TASKS", "10")  # the dashboard process reads it
    ember_start(num_cpus=2)
    assert ember.get([leaf.remote(i) for i in range(30)]) == list(range(1, 31))

    def evicted() -> dict | None:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ember.timeline(filename=str(tmp_path / "t.json"))
        info = json.loads((tmp_path / "t.json").read_text())[-1]["args"]
        # The submissions can land a batch before the ends (a busy machine): the kept ten
        # are drawn once their ends are in.
        done = info["dropped"]["tasks"] >= 20 and info["tasks"] == 10
        return {"info": info, "caught": caught} if done else None

    got = wait_until(evicted, timeout=30, interval=0.3, message="20 tasks evicted, 10 drawn")
    assert got["info"]["max_tasks"] == 10
    messages = [str(w.message) for w in got["caught"]]
    assert any("older tasks were evicted" in m and "newest 10 tasks" in m for m in messages)
    assert all(w.filename == __file__ for w in got["caught"])


def test_lanes_never_overlap_in_or_out_of_order():
    import random

    lanes = tl._Lanes()
    rnd = random.Random(3)
    placed: dict[int, list[tuple[int, int]]] = {}
    # Seven tasks in flight at a time, in start order, then a few late records out of order.
    intervals = [(i * 10, i * 10 + 70) for i in range(500)]
    intervals += [(s, s + rnd.randrange(1, 40)) for s in rnd.sample(range(0, 5000), 50)]
    for start, end in intervals:
        placed.setdefault(lanes.place(1, 7, start, end), []).append((start, end))
    assert len(placed) <= 9  # seven overlap at once; the late ones find room in a few lanes
    for row in placed.values():
        recent = sorted(row[-tl.LANE_MEMORY :])
        assert all(a[1] <= b[0] for a, b in zip(recent, recent[1:], strict=False)), recent
    assert lanes.place(1, 7, 10_000, 10_001) == 0  # after everything: the first lane again
