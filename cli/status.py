"""``ember status``: the cluster's nodes, resource usage and pending demands, laid out like
``ray status`` (../shared/reference/ray-2.60-cli-output.md), or JSON for scripts."""

from __future__ import annotations

import datetime
import os
from typing import Any

import click
from ember.cli.api_client import cluster_options, cluster_settings
from ember.cli.errors import fail
from ember.cli.output import emit, format_option
from ember.cli.status_autoscaler import autoscaler_section, node_status_lines, request_lines
from ember.resources import fmt as fmt_shape
from ember.resources import fmt_request, waiting_bundles

_BAR = "-" * 63
# Shown as byte sizes rather than counts.
_BYTE_RESOURCES = ("memory", "object_store_memory")


def fetch(address: str | None, temp_dir: str | None, token: str | None = None) -> dict[str, Any]:
    """The GCS's cluster_info; ConnectionError naming the address tried. Given a dashboard's
    URL, the same figures from the dashboard (its copy of them, at most a second old): a
    Ray user reaches a remote cluster by that URL, often through a tunnel to it alone."""
    from ember.cluster_address import find_gcs_address, is_dashboard_url, token_for
    from ember.dashboard.autoscaler import record as scaler
    from ember.protocol import connection as conn_mod

    if is_dashboard_url(address or os.environ.get("EMBER_ADDRESS")):
        return _from_dashboard(address, temp_dir, token)
    gcs_address = find_gcs_address(address, temp_dir)
    secret = token_for(gcs_address, temp_dir, token) if gcs_address.startswith("tcp:") else None

    async def ask() -> dict:
        conn = await conn_mod.connect(gcs_address, name="gcs", token=secret, timeout=5.0)
        try:
            info = await conn.call("cluster_info", None, timeout=10.0)
            kv = {"namespace": scaler.KV_NAMESPACE, "key": scaler.KV_KEY}
            info["autoscaler"] = await conn.call("kv_get", kv, timeout=10.0)
            return info
        finally:
            conn.close()

    loop = conn_mod.new_event_loop()
    try:
        info = loop.run_until_complete(ask())
    except conn_mod.AuthenticationError:
        raise
    except (OSError, TimeoutError) as e:
        raise ConnectionError(
            f"could not reach the Ember cluster at {gcs_address}: {e or type(e).__name__}"
        ) from None
    finally:
        loop.close()
    info["gcs_address"] = gcs_address
    if info.get("dashboard_url"):
        info["task_counts"] = _task_counts(address, temp_dir, token)
    return info


def _task_counts(address: str | None, temp_dir: str | None, token: str | None) -> dict | None:
    """Tasks by state from the dashboard's task table (every owner's queue, exact), or None
    when the dashboard does not answer: the raylets' demands are then all there is."""
    from ember.rest_client import DashboardError, connect_dashboard

    try:
        return connect_dashboard(address, token, temp_dir).get("/api/cluster_status", timeout=5)[
            "tasks"
        ]
    except (DashboardError, OSError, KeyError, TypeError):
        return None


def _from_dashboard(address: str | None, temp_dir: str | None, token: str | None) -> dict:
    from ember.rest_client import DashboardError, connect_dashboard

    try:
        api = connect_dashboard(address, token, temp_dir)
        status = api.get("/api/cluster_status", timeout=10)
    except DashboardError as e:
        raise ConnectionError(str(e)) from None
    return {
        "nodes": status.get("gcs_nodes") or [],
        "pending_actors": status.get("pending_actors") or [],
        "placement_groups": status.get("placement_groups") or [],
        "now": status.get("time"),
        "task_counts": status.get("tasks"),
        "autoscaler": status.get("autoscaler"),
        "gcs_address": "",
        "dashboard_url": api.url,
    }


def summarize(info: dict[str, Any], recent_seconds: float = 3600.0) -> dict[str, Any]:
    """The figures ``ember status`` shows, as plain data (the JSON output). Every usage, cluster
    -wide or per node, is ``{"used": x, "total": y}``; every demand shape maps resource names
    to floats; a demand is infeasible when no node alive now could ever hold it."""
    now = info.get("now") or datetime.datetime.now().timestamp()
    alive, dead = [], []
    totals: dict[str, dict[str, float]] = {}
    demands: dict[tuple, dict] = {}

    def demand(shape: dict[str, float], actor: str | None) -> dict:
        shape = {k: float(v) for k, v in shape.items() if v}
        key = tuple(sorted(shape.items())) + ((("actor", actor),) if actor is not None else ())
        fresh = {"shape": shape, "count": 0, "infeasible": False}
        if actor is not None:
            fresh["actor"] = actor
        return demands.setdefault(key, fresh)

    for n in info["nodes"]:
        row = _node_row(n)
        if n["state"] == "ALIVE":
            alive.append(row)
            for name, use in row["usage"].items():
                acc = totals.setdefault(name, {"used": 0.0, "total": 0.0})
                acc["used"] += use["used"]
                acc["total"] += use["total"]
            for d in n.get("pending_demands") or ():
                demand(d["shape"], None)["count"] += d["count"]
        elif n.get("end_time") and now - n["end_time"] < recent_seconds:
            dead.append(row)
    for actor in info.get("pending_actors") or ():
        demand(actor.get("resources") or {}, actor.get("class_name", ""))["count"] += 1
    scaler = autoscaler_section(info.get("autoscaler"), now)
    # With an autoscaler, what could hold a demand is any node type it may launch.
    could_hold = [{"total": t} for t in scaler["node_type_resources"]] if scaler else []
    could_hold = could_hold or alive
    groups = _pending_groups(info.get("placement_groups") or (), could_hold)
    # Decided here, for tasks and actors alike, against the nodes alive now: a reason the GCS
    # noted when the actor was queued may predate the node that could hold it.
    for agg in demands.values():
        agg["infeasible"] = not any(_fits(agg["shape"], n["total"]) for n in could_hold)
    return {
        "time": datetime.datetime.now().isoformat(sep=" "),
        "gcs_address": info.get("gcs_address", ""),
        "dashboard_url": info.get("dashboard_url", ""),
        "active_nodes": alive,
        "dead_nodes": dead,
        "usage": dict(sorted(totals.items())),
        "pending_demands": sorted(demands.values(), key=lambda d: -d["count"]),
        "pending_placement_groups": groups,
        "pending_tasks": _pending_tasks(info.get("task_counts")),
        "autoscaler": scaler,
        "group_names": {
            g.get("placement_group_id"): g.get("name")
            for g in info.get("placement_groups") or ()
            if g.get("name")
        },
    }


# The task table's states of a task not yet running, in the words `status` prints.
_WAITING = {
    "PENDING_NODE_ASSIGNMENT": "waiting for a node",
    "PENDING_ARGS_AVAIL": "waiting for their arguments",
    "SUBMITTED_TO_WORKER": "sent to a worker",
    "RETRYING": "about to be retried",
}


def _pending_tasks(counts: dict[str, int] | None) -> dict[str, int] | None:
    """The exact number of tasks not running yet, by state (None: not known)."""
    if counts is None:
        return None
    return {s: int(counts.get(s) or 0) for s in _WAITING}


def _pending_groups(groups: Any, could_hold: list[dict]) -> list[dict[str, Any]]:
    """Placement groups waiting for room (a rescheduling group: for the bundles it lost with
    a node), one entry per (bundles, strategy): a group is infeasible when no set of the
    nodes that could hold it (``could_hold``, each with its ``total``: the nodes alive now,
    or the node types an autoscaler may launch) could hold its bundles as its strategy says; judged
    here per bundle (each must fit some node), the check Ray's status makes."""
    out: dict[tuple, dict[str, Any]] = {}
    for g in groups:
        wanted = waiting_bundles(g)
        if wanted is None:
            continue
        bundles = [{k: float(v) for k, v in b.items() if v} for b in wanted]
        key = (repr(bundles), g.get("strategy", "PACK"))
        entry = out.setdefault(
            key,
            {"bundles": bundles, "strategy": g.get("strategy", "PACK"), "count": 0},
        )
        entry["count"] += 1
        entry["infeasible"] = not all(
            any(_fits(b, n["total"]) for n in could_hold) for b in bundles
        )
    return sorted(out.values(), key=lambda e: -e["count"])


def _node_row(n: dict) -> dict[str, Any]:
    total = n.get("resources_total") or {}
    avail = n.get("resources_available") or {}
    usage: dict[str, dict[str, float]] = {}
    for name, amount in total.items():
        if _hidden(name):
            continue
        usage[name] = {"used": max(amount - avail.get(name, amount), 0.0), "total": float(amount)}
    store = n.get("store_stats") or {}
    if "capacity_bytes" in store:
        usage["object_store_memory"] = {
            "used": float(store["used_bytes"]),
            "total": float(store["capacity_bytes"]),
        }
    return {
        "node_id": n["node_id"].hex() if isinstance(n["node_id"], bytes) else n["node_id"],
        "node_ip": n.get("node_ip", ""),
        "is_head": n.get("is_head", False),
        "state": n["state"],
        "death_reason": n.get("death_reason", ""),
        "total": {k: v for k, v in total.items() if not _hidden(k)},
        "usage": usage,
    }


def _hidden(name: str) -> bool:
    # Placement-group bundles appear as renamed copies of resources; Ray hides them too.
    return "_group_" in name


def _fits(shape: dict[str, float], total: dict[str, float]) -> bool:
    return all(v <= 0 or total.get(k, 0) >= v for k, v in shape.items())


def _amount(name: str, value: float) -> str:
    return _bytes(value) if name in _BYTE_RESOURCES else f"{value:.1f}"


def _bytes(n: float) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.2f}{unit}"
    return f"{int(n)}B"


def _usage_lines(usage: dict[str, dict[str, float]], indent: str) -> list[str]:
    def order(name: str) -> tuple:
        return (name not in ("CPU", "GPU"), name in _BYTE_RESOURCES, name)

    lines = []
    for name in sorted(usage, key=order):
        used, total = usage[name]["used"], usage[name]["total"]
        lines.append(f"{indent}{_amount(name, used)}/{_amount(name, total)} {name}")
    return lines


def render(summary: dict[str, Any]) -> str:
    scaler = summary.get("autoscaler")
    if scaler:  # an autoscaler runs: the node status by node type, from its record
        out = [f"======== Autoscaler status: {summary['time']} ========", "Node status", _BAR]
        out += node_status_lines(scaler)
    else:
        out = [f"======== Cluster status: {summary['time']} ========", "Node status", _BAR]
        out += _node_lines(summary)
    out += ["", "Resources", _BAR, "Total Usage:"]
    out += _usage_lines(summary["usage"], " ") or [" (no resources)"]
    if scaler:
        out += request_lines(scaler)
    out += ["", "Per Node Usage:"]
    for n in summary["active_nodes"]:
        out.append(f" node_{n['node_id']} ({n['node_ip']}):")
        out += _usage_lines(n["usage"], "  ")
    out += ["", "Pending Demands:"]
    # What could never be placed: with an autoscaler, on no node type it may launch.
    why = "no node type has" if scaler else "no node has"
    if summary["pending_demands"]:  # tasks and actors
        for d in summary["pending_demands"]:
            # Bytes in units: {'memory': 2199023255552.0} is a count of digits to the reader.
            # A placement group's demand by the group's name and bundle, not CPU_group_0_<id>.
            shape = fmt_request(d["shape"], summary.get("group_names"))
            what = f"actor {d['actor']}" if d.get("actor") else "tasks/actors"
            flag = f" (infeasible: {why} these resources)" if d["infeasible"] else ""
            out.append(f" {shape}: {d['count']}+ pending {what}{flag}")
    for g in summary["pending_placement_groups"]:
        # As Ray prints a group's demand: its bundles and its strategy.
        shapes = ", ".join(fmt_shape(b) for b in g["bundles"])
        flag = f" (infeasible: {why} these resources)" if g["infeasible"] else ""
        out.append(f" {shapes} ({g['strategy']}): {g['count']}+ pending placement groups{flag}")
    if not summary["pending_demands"] and not summary["pending_placement_groups"]:
        out.append(" (no resource demands)")
    out += _pending_task_lines(summary)
    if summary["dashboard_url"]:
        out += ["", f"Dashboard: {summary['dashboard_url']}"]
    return "\n".join(out)


def _node_lines(summary: dict[str, Any]) -> list[str]:
    """The node status without an autoscaler: each live node, none pending, the dead."""
    out = ["Active:"]
    if summary["active_nodes"]:
        for n in summary["active_nodes"]:
            head = ", head" if n["is_head"] else ""
            out.append(f" 1 node_{n['node_id']} ({n['node_ip']}{head})")
    else:
        out.append(" (no active nodes)")
    out += ["Pending:", " (no pending nodes)", "Recent failures:"]
    if summary["dead_nodes"]:
        for n in summary["dead_nodes"]:
            had = ", ".join(f"{_amount(k, v)} {k}" for k, v in sorted(n["total"].items()) if v)
            out.append(
                f" node_{n['node_id']} ({n['node_ip']}): {n['death_reason'] or 'dead'} (had {had})"
            )
    else:
        out.append(" (no failures)")
    return out


def _pending_task_lines(summary: dict[str, Any]) -> list[str]:
    """Under the demands: "N+" counts lease requests (an owner asks for a few workers at a
    time however many tasks it queues), so the exact count of waiting tasks follows."""
    pending = summary.get("pending_tasks")
    if pending is None:
        if not summary["pending_demands"]:
            return []
        return [
            " (N+: the lease requests queued at the raylets, a lower bound; the dashboard's "
            "Tasks page counts every pending task)"
        ]
    total = sum(pending.values())
    parts = ", ".join(f"{n} {_WAITING[s]}" for s, n in pending.items() if n)
    return [
        f" Pending tasks (exact, every owner's queue): {total}" + (f" ({parts})" if parts else "")
    ]


@click.command()
@cluster_options
@format_option
def status(address: str | None, fmt: str) -> None:
    """Show the cluster's nodes, resource usage and pending demands."""
    from ember.protocol.connection import AuthenticationError

    token, temp_dir = cluster_settings()
    try:
        summary = summarize(fetch(address, temp_dir, token))
    except (ConnectionError, AuthenticationError, ValueError) as e:
        fail(str(e))
    emit(summary, fmt, render)
