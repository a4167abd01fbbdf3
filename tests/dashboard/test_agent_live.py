"""What the agent measures (issue 4 §1), read back from a real node's dashboard: the node
sample's fields and each worker's, with the state worded as the issue words it."""

from __future__ import annotations

import os
import time

import ember
import httpx
from ember_test_utils import wait_until


def _get(http: httpx.Client, path: str, **params) -> dict:
    r = http.get(path, params=params)
    assert r.status_code == 200, (path, r.status_code, r.text[:300])
    return r.json()


@ember.remote
def busy_in_a_named_function(seconds: float) -> int:
    end = time.time() + seconds
    while time.time() < end:
        pass
    return os.getpid()


@ember.remote
class Holder:
    def pid(self) -> int:
        return os.getpid()


def test_node_sample_has_every_field_the_issue_lists(live):
    _, http, _ = live
    node = wait_until(lambda: _get(http, "/api/nodes")["items"], 15, 0.2, "the node")[0]

    # Rates are differences between two samples: wait for the second one.
    def sample() -> dict | None:
        m = _get(http, f"/api/nodes/{node['node_id']}")["metrics"]
        return m if "disk_read_bytes_per_s" in m and m.get("num_workers") is not None else None

    m = wait_until(sample, 15, 0.2, "a node sample")
    assert len(m["load_avg"]) == 3 and all(x >= 0 for x in m["load_avg"])
    assert 0 < m["mem_available_bytes"] <= m["mem_total_bytes"]
    assert 0 <= m["mem_shared_bytes"] <= m["mem_total_bytes"]
    for key in (
        "disk_read_bytes_per_s",
        "disk_write_bytes_per_s",
        "net_sent_bytes_per_s",
        "net_recv_bytes_per_s",
    ):
        assert isinstance(m[key], int | float) and m[key] >= 0, key
    assert m["uptime_s"] > 0 and abs(m["boot_time"] + m["uptime_s"] - time.time()) < 60
    assert "gpus" not in m  # no NVML on this machine: absent, not empty or zero


def test_workers_have_their_costs_and_their_state_in_words(live):
    _, http, _ = live
    holder = Holder.options(name="agent-live-holder").remote()
    actor_pid = ember.get(holder.pid.remote())
    # A node starts no worker ahead of demand: one task leaves an idle one behind.
    ember.get(busy_in_a_named_function.remote(0), timeout=30)

    def workers() -> dict[int, dict]:
        return {w["pid"]: w for w in _get(http, "/api/workers", limit=1000)["items"]}

    idle = wait_until(
        lambda: [w for w in workers().values() if w.get("state") == "IDLE"], 30, 0.3, "idle"
    )
    assert all(w["activity"] == "idle" for w in idle)
    ref = busy_in_a_named_function.remote(30)

    def busy() -> tuple | None:
        by_pid = workers()
        running = [
            w
            for w in by_pid.values()
            if (w.get("current_task") or "").endswith("busy_in_a_named_function")
            and w.get("cpu_percent")
        ]
        actor = by_pid.get(actor_pid)
        return (actor, running[0], by_pid) if actor and running else None

    actor, running, by_pid = wait_until(busy, 30, 0.3, "the actor and the busy worker")
    assert actor["state"] == "ACTOR" and actor["actor_class"].endswith("Holder")
    assert actor["activity"] == f"actor {actor['actor_class']}"
    assert running["state"] == "RUNNING" and running["cpu_percent"] > 0  # it spins
    assert running["activity"] == f"running {running['current_task']}"
    for w in by_pid.values():  # workers and Ember's own processes alike
        assert w["rss_bytes"] > 0 and w["num_open_files"] > 0, w
        assert w["uss_bytes"] is not None and 0 < w["uss_bytes"] <= w["rss_bytes"], w
        assert w["cpu_percent"] is not None and w["cpu_percent"] >= 0, w
        assert 0 <= w["uptime_s"] < 3600, w
        assert abs(time.time() - w["start_time"] - w["uptime_s"]) < 10, w
    kinds = {w["kind"] for w in by_pid.values()}
    assert {"raylet", "gcs_server", "dashboard", "worker", "driver"} <= kinds
    # The words filter and sort on the server like any other field.
    mine = _get(http, "/api/workers", filter=f"activity={actor['activity']}")["items"]
    assert [w["pid"] for w in mine] == [actor_pid]
    oldest = _get(http, "/api/workers", sort_by="uptime_s", descending="true", limit=1000)
    ups = [w["uptime_s"] for w in oldest["items"]]
    assert ups == sorted(ups, reverse=True)
    ember.cancel(ref, force=True)
    ember.kill(holder)


def test_the_heads_agent_keeps_its_own_log_file(live):
    """The head's agent runs in the dashboard's process but logs to ``agent.log``, like every
    other node's agent, where ``ember logs agent*`` and the log index find it."""
    ctx, http, _ = live
    assert os.path.exists(os.path.join(ctx.session_dir, "logs", "agent.log"))
    files = wait_until(
        lambda: [f for f in _get(http, "/api/logs")["items"] if f["name"] == "agent.log"],
        15,
        0.2,
        "agent.log in the log index",
    )
    assert files


def test_log_to_own_file_keeps_records_out_of_the_process_log(tmp_path):
    import logging

    from ember.process_util import log_to_own_file

    own, shared = tmp_path / "own.log", tmp_path / "shared.log"
    root_handler = logging.FileHandler(shared)
    logging.getLogger().addHandler(root_handler)
    try:
        log_to_own_file("ember.test_component", str(own))
        logging.getLogger("ember.test_component").warning("component-marker")
        logging.getLogger("ember.test_other").warning("other-marker")
    finally:
        logging.getLogger().removeHandler(root_handler)
        for h in logging.getLogger("ember.test_component").handlers:
            h.close()
        root_handler.close()
    assert "component-marker" in own.read_text() and "WARNING" in own.read_text()
    assert "component-marker" not in shared.read_text()
    assert "other-marker" in shared.read_text()
