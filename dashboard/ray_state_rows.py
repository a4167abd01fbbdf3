"""Ember's dashboard state turned into Ray's state API rows (``ray_state_schema``).

Each function reads what the dashboard already holds (the GCS poll, the agents' reports, the
task table) and returns full rows, every column of the resource; the route filters them and
keeps the columns a reply shows. Values follow Ray's types: ids as hex text, times in
milliseconds as integers, Ray's names for states Ember calls otherwise.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
from typing import Any

from ember.dashboard.state import DashboardState
from ember.dashboard.task_logs import task_log_info
from ember.dashboard.task_table import TaskView
from ember.labels import node_labels as labels_of
from ember.util.state.common import JobState

# Ember's task phases in Ray's words: a task being retried waits for a node again.
TASK_STATE = {"RETRYING": "PENDING_NODE_ASSIGNMENT"}
# The dashboard's actor states (already folded from the GCS's) in Ray's words.
ACTOR_STATE = {"PENDING": "PENDING_CREATION"}
# An object's status in the memory view as the state of the task that makes it.
OBJECT_TASK_STATUS = {"FINISHED": "FINISHED", "PENDING": "PENDING_NODE_ASSIGNMENT"}
REFERENCE_TYPES = frozenset(
    {
        "ACTOR_HANDLE",
        "PINNED_IN_MEMORY",
        "LOCAL_REFERENCE",
        "USED_BY_PENDING_TASK",
        "CAPTURED_IN_OBJECT",
    }
)
# How a failure's text names its kind, in the order they are looked for.
ERROR_TYPES = (
    ("TaskCancelledError", "TASK_CANCELLED"),
    ("ActorDiedError", "ACTOR_DIED"),
    ("ActorUnavailableError", "ACTOR_UNAVAILABLE"),
    ("WorkerCrashedError", "WORKER_DIED"),
    ("OutOfMemoryError", "OUT_OF_MEMORY"),
    ("ObjectLostError", "OBJECT_UNRECONSTRUCTABLE"),
)


RAY_JOB_FIELDS = tuple(f.name for f in dataclasses.fields(JobState))


def ms(t: float | None) -> int | None:
    return None if t is None else int(t * 1000)


def _node_ips(st: DashboardState) -> dict[str, str]:
    ips = {nid: n.info.get("node_ip") or "" for nid, n in st.nodes.items()}
    for n in st.cluster.get("nodes", []):
        if n.get("node_id") and n.get("node_ip"):
            ips[n["node_id"]] = n["node_ip"]
    return ips


# -- actors --------------------------------------------------------------------------------
def actor_rows(st: DashboardState) -> list[dict[str, Any]]:
    ips = _node_ips(st)
    return [actor_row(r, ips) for r in st.actors.values()]


def actor_row(r: dict[str, Any], ips: dict[str, str]) -> dict[str, Any]:
    state = ACTOR_STATE.get(r.get("state") or "", r.get("state") or "PENDING_CREATION")
    cause = None
    if state == "DEAD":
        # Ray's death cause is a structure; Ember's is a sentence, carried as its message.
        cause = {
            "actor_died_error_context": {
                "error_message": r.get("death_cause") or "",
                "actor_id": r["actor_id"],
                "class_name": r.get("class_name") or "",
                "name": r.get("name") or "",
                "ray_namespace": r.get("namespace") or "",
                "pid": r.get("pid") or 0,
                "node_ip_address": ips.get(r.get("node_id") or "", ""),
                "owner_id": r.get("owner_worker_id") or "",
            }
        }
    return {
        "actor_id": r["actor_id"],
        "class_name": r.get("class_name") or "",
        "state": state,
        "job_id": r.get("job_id") or "",
        "name": r.get("name") or "",
        "node_id": r.get("node_id") or None,
        "pid": r.get("pid") or None,
        "ray_namespace": r.get("namespace"),
        "serialized_runtime_env": None,
        "required_resources": r.get("resources") or {},
        "death_cause": cause,
        "is_detached": bool(r.get("detached")),
        "placement_group_id": r.get("placement_group_id") or None,
        "repr_name": "",
        "num_restarts": int(r.get("num_restarts") or 0),
        "num_restarts_due_to_lineage_reconstruction": 0,
        "num_restarts_due_to_node_preemption": 0,
        "call_site": None,
        "label_selector": {},
        "fallback_strategy": None,
    }


# -- tasks ---------------------------------------------------------------------------------
def task_row(st: DashboardState, slot: int) -> dict[str, Any]:
    """A task's row without its ``events`` (the route adds them to the rows it shows)."""
    table = st.tasks
    r = table.row(slot)
    state = TASK_STATE.get(r["state"], r["state"])
    name = r["name"] or ""
    flow = st.timeline.flows.get(r["task_id"])
    error = r["error"]
    row = {
        "task_id": r["task_id"],
        "attempt_number": r["attempt"],
        "name": name,
        "state": state,
        "job_id": r["job_id"] or "",
        "actor_id": r["actor_id"] or None,
        "type": r["type"],
        "func_or_class_name": name,
        "parent_task_id": (flow[0] if flow else "") or "",
        "node_id": r["node_id"] or None,
        "worker_id": r["worker_id"] or None,
        "worker_pid": r["pid"],
        "error_type": (r["error_type"] or error_type(error)) if state == "FAILED" else None,
        "language": "PYTHON",
        "required_resources": None,
        "runtime_env_info": None,
        "placement_group_id": r.get("placement_group_id") or None,
        "events": None,
        "profiling_data": None,
        "creation_time_ms": ms(r["submitted_time"]),
        "start_time_ms": ms(r["start_time"]),
        "end_time_ms": ms(r["end_time"]),
        "task_log_info": task_log_info(TaskView(table, slot)),
        "error_message": error,
        "is_debugger_paused": None,
        "call_site": None,
        "label_selector": {},
        "fallback_strategy": None,
    }
    return row


def error_type(error: str | None) -> str:
    text = error or ""
    for marker, kind in ERROR_TYPES:
        if marker in text:
            return kind
    return "TASK_EXECUTION_EXCEPTION"


# -- nodes and workers ---------------------------------------------------------------------
def node_rows(st: DashboardState) -> list[dict[str, Any]]:
    """The GCS's nodes, and any node only an agent reported (the GCS poll not in yet)."""
    rows = []
    seen = set()
    for n in st.cluster.get("nodes", []):
        nid = n.get("node_id") or ""
        entry = st.nodes.get(nid)
        seen.add(nid)
        alive = n.get("state") == "ALIVE"
        message = n.get("death_reason") or (entry.lost_reason if entry else "") or None
        rows.append(
            _node_row(
                nid,
                n.get("node_ip") or (entry.info.get("node_ip") if entry else "") or "",
                bool(n.get("is_head")),
                alive,
                None if alive else message,
                n.get("hostname") or "",
                n.get("resources_total") or {},
                n.get("start_time"),
                n.get("end_time"),
                n.get("labels"),
            )
        )
    for nid, entry in st.nodes.items():
        if nid in seen:
            continue
        alive = entry.state == "ALIVE"
        rows.append(
            _node_row(
                nid,
                entry.info.get("node_ip") or "",
                bool(entry.info.get("is_head")),
                alive,
                None if alive else entry.lost_reason or None,
                entry.info.get("hostname") or "",
                entry.info.get("resources_total") or {},
                entry.info.get("start_time", entry.start_time),
                None if alive else entry.last_seen,
                entry.info.get("labels"),
            )
        )
    return rows


def _node_row(
    nid: str,
    ip: str,
    head: bool,
    alive: bool,
    message: str | None,
    hostname: str,
    resources: dict[str, float],
    start: float | None,
    end: float | None,
    node_labels: dict[str, str] | None,
) -> dict[str, Any]:
    labels = labels_of(nid, node_labels)
    if hostname:
        labels["ember.io/hostname"] = hostname
    return {
        "node_id": nid,
        "node_ip": ip,
        "is_head_node": head,
        "state": "ALIVE" if alive else "DEAD",
        "state_message": message,
        # Ray names a node by its IP unless it was given a name; Ember nodes have none.
        "node_name": ip,
        "resources_total": resources,
        "labels": labels,
        "start_time_ms": ms(start),
        "end_time_ms": ms(end),
    }


def worker_rows(st: DashboardState, jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every live worker and driver process the agents report (other Ember processes, the
    raylet or the agent, are not Ray workers). An agent knows a driver by its pid only; its
    worker id is the one its job registered with the GCS (``jobs``, from ``list_jobs``)."""
    ips = _node_ips(st)
    drivers = {
        (j.get("node_id"), j.get("driver_pid")): j.get("driver_worker_id")
        for j in jobs
        if j.get("state") != "FINISHED"
    }
    rows = []
    for w in st.all_workers():
        kind = w.get("kind")
        worker_id = w.get("worker_id")
        if kind == "driver" and not worker_id:
            worker_id = drivers.get((w.get("node_id"), w.get("pid")))
        if kind not in ("worker", "driver") or not worker_id:
            continue
        start = ms(w.get("start_time"))
        rows.append(
            {
                "worker_id": worker_id,
                "is_alive": True,
                "worker_type": "DRIVER" if kind == "driver" else "WORKER",
                "exit_type": None,
                "node_id": w.get("node_id") or "",
                "ip": ips.get(w.get("node_id") or "", ""),
                "pid": int(w.get("pid") or 0),
                "exit_detail": None,
                "worker_launch_time_ms": start,
                "worker_launched_time_ms": start,
                "start_time_ms": start,
                "end_time_ms": None,
                "debugger_port": None,
                "num_paused_threads": None,
            }
        )
    return rows


# -- objects, placement groups, jobs, events -----------------------------------------------
def object_rows(st: DashboardState) -> list[dict[str, Any]]:
    ips = _node_ips(st)
    rows = []
    for node_id, kept in st.objects.items():
        for r in kept:
            size = r.get("object_size")
            kind = r.get("reference_type") or "UNKNOWN_STATUS"
            rows.append(
                {
                    "object_id": r.get("object_id") or "",
                    "object_size": int(size) if isinstance(size, int | float) else -1,
                    "task_status": OBJECT_TASK_STATUS.get(r.get("status") or "", "NIL"),
                    "attempt_number": 0,
                    "reference_type": kind if kind in REFERENCE_TYPES else "UNKNOWN_STATUS",
                    "call_site": r.get("call_site") or "disabled",
                    "type": "DRIVER" if r.get("is_driver") else "WORKER",
                    "pid": int(r.get("pid") or 0),
                    "ip": r.get("ip") or ips.get(node_id, ""),
                }
            )
    return rows


def placement_group_rows(st: DashboardState) -> list[dict[str, Any]]:
    """Ember's rows (``st.placement_group_rows``) in Ray's words."""
    rows = []
    for pg in st.placement_group_rows():
        pg_id = pg["placement_group_id"]
        bundles = [
            {
                "bundle_id": f"{pg_id}:{b['index']}",
                "node_id": b["node_id"],
                "unit_resources": b["resources"],
                "label_selector": {},
            }
            for b in pg["bundles"]
        ]
        rows.append(
            {
                "placement_group_id": pg_id,
                "name": pg["name"],
                "creator_job_id": pg["job_id"],
                "state": pg["state"],
                "bundles": bundles,
                "is_detached": pg["detached"],
                "stats": {"scheduling_state": pg["pending_reason"] or pg["state"]},
                # Label-keyed topology (Ray's experimental field): Ember's groups have none.
                "topology_strategy": {},
                "topology_assignments": {},
            }
        )
    return rows


def job_rows(jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``GET /api/jobs/``'s rows (submitted jobs and drivers started by hand, ``schemas.Job``)
    as Ray's state API lists them: Ray's JobDetails fields, which lead Ember's row."""
    return [{k: j[k] for k in RAY_JOB_FIELDS} for j in jobs]


def cluster_event_rows(st: DashboardState) -> list[dict[str, Any]]:
    rows = []
    for ev in st.events:
        when = datetime.datetime.fromtimestamp(ev["time"])
        key = f"{ev['time']}|{ev.get('kind')}|{ev.get('message')}".encode()
        rows.append(
            {
                "severity": ev.get("severity") or "INFO",
                "time": when.strftime("%Y-%m-%d %H:%M:%S"),
                "source_type": (ev.get("source") or "").upper(),
                "message": ev.get("message") or "",
                # Events have no id of their own: one from what makes each distinct.
                "event_id": hashlib.blake2b(key, digest_size=18).hexdigest(),
                "custom_fields": {
                    "kind": ev.get("kind") or "",
                    "node_id": ev.get("node_id"),
                    "pid": ev.get("pid"),
                    "detail": ev.get("detail"),
                },
            }
        )
    return rows
