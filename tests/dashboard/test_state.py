"""The state store on its own: caps and drop counts, out-of-order events, summaries, history."""

from __future__ import annotations

import pytest
from ember.dashboard.config import Caps
from ember.dashboard.history import History
from ember.dashboard.pubsub import PubSub
from ember.dashboard.query import QueryError, page, parse_filters
from ember.dashboard.state import DashboardState


def _events(n: int, name: str = "f", state: str = "FINISHED", start: int = 0) -> list:
    out = []
    for i in range(start, start + n):
        tid = f"{i:032x}"
        out.append([tid, "PENDING_ARGS_AVAIL", 1.0 + i, 0, {"name": name}])
        out.append([tid, state, 2.0 + i, 0, {"timings": {"start": 1.5 + i, "end": 2.0 + i}}])
    return out


def test_task_cap_evicts_oldest_and_counts_drops():
    st = DashboardState(Caps(max_tasks=100))
    st.add_task_events("n1", "j1", _events(150))
    assert len(st.tasks) == 100
    assert st.dropped["tasks"] == 50
    assert st.tasks.counts["state"]["FINISHED"] == 100
    assert f"{0:032x}" not in st.tasks and f"{149:032x}" in st.tasks
    # Slots are reused: the newest 100 are kept, newest first, with their own fields.
    rows = st.tasks.page([], limit=100, offset=0, sort_by=None, descending=False)["items"]
    assert [r["task_id"] for r in rows] == [f"{i:032x}" for i in range(149, 49, -1)]
    assert rows[0]["start_time"] == 1.5 + 149 and rows[0]["name"] == "f"


def test_terminal_state_survives_late_earlier_event():
    st = DashboardState()
    tid = "ab" * 16
    st.add_task_events("n", "j", [[tid, "FINISHED", 5.0, 0, {"function": "g"}]])
    st.add_task_events("n", "j", [[tid, "SUBMITTED_TO_WORKER", 4.0, 0, {"worker_id": "w"}]])
    rec = st.tasks.get(tid)
    assert rec.state == "FINISHED" and rec.name == "g" and rec.worker_id == "w"
    assert st.tasks.counts["state"] == {"FINISHED": 1}


def test_a_retry_is_a_new_attempt_and_the_first_stays_failed():
    st = DashboardState()
    tid = "cd" * 16
    st.add_task_events("n", "j", [[tid, "FAILED", 1.0, 0, None], [tid, "RETRYING", 2.0, 1, None]])
    assert st.tasks.get(tid).state == "RETRYING" and st.tasks.get(tid).attempt == 1
    assert st.tasks.get(tid, 0).state == "FAILED" and len(st.tasks) == 2


def test_a_workers_current_task_is_the_one_it_runs_now():
    """The raylet names a lease by its first function; the worker's RUNNING events say which
    task (by its name) it runs now, and the owner's end says it is between tasks."""
    st = DashboardState()
    row = {"pid": 42, "worker_id": "w1", "kind": "worker", "state": "RUNNING"}
    st.set_workers("n", [{**row, "current_task": "first", "activity": "running first"}])
    ran = {"worker_id": "w1", "pid": 42, "node_id": "n"}

    def shown() -> tuple:
        [w] = st.all_workers()
        [same] = st.node_workers("n")
        assert same == w
        return w["current_task"], w["activity"]

    assert shown() == ("first", "running first")  # no events yet: the raylet's word
    a, b = "a1" * 16, "b2" * 16
    st.add_task_events("n", "j", [[a, "RUNNING", 1.0, 0, {"name": "first", **ran}]])
    st.add_task_events("n", "j", [[a, "FINISHED", 2.0, 0, None]])
    assert shown() == (None, "leased, between tasks")
    st.add_task_events("n", "j", [[b, "RUNNING", 3.0, 0, {"name": "second-job", **ran}]])
    assert shown() == ("second-job", "running second-job")
    assert st.workers["n"][42]["current_task"] == "first"  # the stored row is the agent's
    st.forget_node("n")
    assert st.current.running("w1") == (False, None)


def test_filter_applies_before_limit_and_total_counts_matches():
    st = DashboardState()
    st.add_task_events("n", "j", _events(500, name="common"))
    st.add_task_events("n", "j", _events(3, name="rare", state="FAILED", start=500))
    st.add_task_events("n", "j", _events(500, name="common", start=503))
    preds = parse_filters(["name=rare"], ("name", "state"))
    out = st.tasks.page(preds, limit=2, offset=0, sort_by=None, descending=False)
    assert out["total"] == 3 and [r["name"] for r in out["items"]] == ["rare", "rare"]
    # Two filters: no counter answers, so the table scans and still finds all three.
    preds = parse_filters(["name=rare", "state=FAILED"], ("name", "state"))
    out = st.tasks.page(preds, limit=100, offset=1, sort_by=None, descending=False)
    assert out["total"] == 3 and len(out["items"]) == 2


def test_summary_by_function_and_state():
    st = DashboardState()
    st.add_task_events("n", "j", _events(4, name="a"))
    st.add_task_events("n", "j", _events(2, name="b", state="FAILED", start=4))
    rows = {r["name"]: r for r in st.tasks.summary()}
    assert rows["a"]["states"] == {"FINISHED": 4} and rows["b"]["states"] == {"FAILED": 2}


def test_actor_cap_drops_dead_actors_first():
    st = DashboardState(Caps(max_actors=3))
    st.update_actor({"actor_id": "a1", "state": "DEAD", "class_name": "C"})
    st.update_actor({"actor_id": "a2", "state": "ALIVE", "class_name": "C"})
    st.update_actor({"actor_id": "a3", "state": "PENDING_CREATION", "class_name": "C"})
    st.update_actor({"actor_id": "a4", "state": "ALIVE", "class_name": "C"})
    assert set(st.actors) == {"a2", "a3", "a4"} and st.dropped["actors"] == 1
    assert st.actors["a3"]["state"] == "PENDING"  # the GCS's PENDING_CREATION, shown as PENDING


def test_actor_calls_and_creator_come_from_task_events():
    st = DashboardState()
    st.update_actor({"actor_id": "p", "state": "ALIVE", "worker_id": "wp", "class_name": "P"})
    st.update_actor({"actor_id": "c", "state": "ALIVE", "owner_worker_id": "wp", "class_name": "C"})
    st.add_task_events(
        "n",
        "j",
        [
            ["t1", "PENDING_ARGS_AVAIL", 1.0, 0, {"name": "C.m", "actor_id": "c"}],
            ["t2", "PENDING_ARGS_AVAIL", 1.0, 0, {"name": "C.m", "actor_id": "c"}],
            ["t1", "FINISHED", 2.0, 0, None],
        ],
    )
    row = st.actor_row("c")
    assert row["executed_calls"] == 1 and row["pending_calls"] == 1
    assert row["creator_actor_id"] == "p"


def test_history_keeps_only_the_window():
    h = History(seconds=10, period=1)
    for t in range(100):
        h.add("n", float(t), {"cpu_percent": t, "ignored": 1})
    samples = h.query("n")
    assert samples[0]["time"] >= 89 and samples[-1] == {"time": 99.0, "cpu_percent": 99}
    assert len(h.rings["n"]) <= h.maxlen


def test_cluster_history_sums_live_nodes():
    st = DashboardState(Caps(history_period=1.0))
    st.node_metrics("a", 10.0, {"cpu_percent": 20.0, "mem_used_bytes": 100})
    st.node_metrics("b", 11.0, {"cpu_percent": 40.0, "mem_used_bytes": 50})
    last = st.history.query("cluster")[-1]
    assert last["mem_used_bytes"] == 150 and last["cpu_percent"] == 30.0


def test_node_lost_keeps_its_data_and_says_why():
    st = DashboardState()
    st.node_metrics("a", 1.0, {"cpu_percent": 1.0})
    st.node_lost("a", "its agent disconnected")
    assert st.node_row("a")["state"] == "DEAD"
    assert st.node_row("a")["lost_reason"] == "its agent disconnected"
    assert any(e["kind"] == "NODE_LOST" for e in st.events)


def test_a_lost_agent_is_not_a_lost_node_once_the_gcs_decides():
    st = DashboardState()
    st.node_metrics("a", 1.0, {"cpu_percent": 1.0})
    st.agent_gone("a")  # no GCS read yet: the agent is all there is to go on
    assert st.node_row("a")["lost_reason"] == "its agent disconnected"
    st.update_node("a", {})
    st.reconcile_nodes([{"node_id": "a", "state": "ALIVE"}])
    st.agent_gone("a")  # an agent restarting on a live node
    assert st.node_row("a")["state"] == "ALIVE"
    assert st.events[-1]["kind"] == "AGENT_DISCONNECTED"
    st.reconcile_nodes(
        [
            {"node_id": "a", "state": "DEAD", "death_reason": "its raylet disconnected"},
            {
                "node_id": "b",
                "state": "DEAD",
                "death_reason": "no heartbeat",
                "node_ip": "10.0.0.2",
            },
        ]
    )
    assert st.node_row("a")["lost_reason"] == "the GCS declared it dead: its raylet disconnected"
    # A node that died before its agent reported is listed too, dead, with the GCS's reason.
    assert st.node_row("b")["state"] == "DEAD" and st.node_row("b")["node_ip"] == "10.0.0.2"
    st.reconcile_nodes([{"node_id": "a", "state": "DEAD", "death_reason": "x"}])
    assert sum(e["kind"] == "NODE_LOST" and e["node_id"] == "a" for e in st.events) == 2


def test_event_buffer_is_bounded():
    st = DashboardState(Caps(max_events=5))
    for i in range(8):
        st.add_event("ERROR", f"e{i}", source="test")
    assert len(st.events) == 5 and st.dropped["events"] == 3


def test_slow_subscriber_loses_oldest_and_is_told():
    import asyncio

    ps = PubSub(maxlen=3)
    sub = ps.subscribe()
    for i in range(5):
        ps.publish({"type": "event", "i": i})
    batch = asyncio.run(sub.next_batch(0.1))
    assert [m.get("i") for m in batch[:-1]] == [2, 3, 4]
    assert batch[-1] == {"type": "dropped", "count": 2}


def test_query_errors_name_the_field():
    with pytest.raises(QueryError) as e:
        parse_filters(["nope=1"], ("state",))
    assert e.value.field == "filter" and "nope" in str(e.value)
    with pytest.raises(QueryError):
        parse_filters(["no-equals-sign"], ("state",))


def test_generic_page_sorts_and_pages():
    rows = [{"x": i % 7, "y": str(i)} for i in range(100)]
    out = page(rows, sort_by="x", descending=True, limit=5, offset=0)
    assert out["total"] == 100 and all(r["x"] == 6 for r in out["items"])
    out = page(rows, predicates=parse_filters(["x!=6"], ("x",)), limit=1000)
    assert out["total"] == 100 - 14
