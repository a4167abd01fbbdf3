"""Issue 4 §1: the agent's own cost on an idle node (target: < 3% of a core, < 80 MB RSS),
and the dashboard's and the whole cluster's idle footprint beside it.

Starts a two-node cluster on this machine (``ember.cluster_utils.Cluster``: a head and one
worker node), lets it settle, then measures CPU time used by each Ember process over
``--seconds`` with psutil, and RSS at the end. The worker node's agent is a process of its own
streaming to the head's dashboard: that is the agent measured. The head's agent runs inside
the dashboard's process, so its cost is part of the dashboard's row.

    .venv/bin/python benchmarks/dashboard_agent_cost.py [--seconds 30] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import time

import ember
import psutil


def ember_processes() -> dict[int, str]:
    out = {}
    for p in psutil.Process().children(recursive=True):
        try:
            cmd = " ".join(p.cmdline())
        except psutil.Error:
            continue
        for key, name in (
            ("ember.agent", "agent"),
            ("ember.dashboard.server", "dashboard"),
            ("ember.gcs", "gcs_server"),
            ("ember.raylet.raylet", "raylet"),
        ):
            if key in cmd:
                out[p.pid] = name
                break
        else:
            out[p.pid] = "workers_and_zygote"
    return out


def cpu_seconds(pid: int) -> float:
    t = psutil.Process(pid).cpu_times()
    return t.user + t.system


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("--settle", type=float, default=8.0)
    p.add_argument("--json", default=None)
    args = p.parse_args()
    from ember.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    try:
        cluster.add_node(num_cpus=1)
        cluster.connect()
        time.sleep(args.settle)  # start-up work (imports, prestarted workers) is not idle cost
        procs = ember_processes()
        before = {pid: cpu_seconds(pid) for pid in procs}
        t0 = time.monotonic()
        time.sleep(args.seconds)
        wall = time.monotonic() - t0
        rows: dict[str, dict[str, float]] = {}
        for pid, name in procs.items():
            try:
                cpu = (cpu_seconds(pid) - before[pid]) / wall * 100
                rss = psutil.Process(pid).memory_info().rss / 2**20
            except psutil.Error:
                continue
            r = rows.setdefault(name, {"processes": 0, "cpu_percent": 0.0, "rss_mb": 0.0})
            r["processes"] += 1
            r["cpu_percent"] = round(r["cpu_percent"] + cpu, 2)
            r["rss_mb"] = round(r["rss_mb"] + rss, 1)
        me = psutil.Process()
        driver_rss = me.memory_info().rss / 2**20
        total_rss = round(sum(r["rss_mb"] for r in rows.values()) + driver_rss, 1)
    finally:
        ember.shutdown()
        cluster.shutdown()
    agent = rows.get("agent", {})  # the worker node's: the only agent process
    result = {
        "window_s": round(wall, 1),
        "by_component": rows,
        "agent_cpu_percent_of_a_core": round(agent.get("cpu_percent", 0), 2),
        "agent_rss_mb": round(agent.get("rss_mb", 0), 1),
        "dashboard_with_head_agent_cpu_percent": rows.get("dashboard", {}).get("cpu_percent"),
        "dashboard_with_head_agent_rss_mb": rows.get("dashboard", {}).get("rss_mb"),
        "cluster_total_rss_mb_incl_driver": total_rss,
    }
    print(json.dumps(result, indent=2))
    print(
        f"\nagent: {result['agent_cpu_percent_of_a_core']}% of a core (target < 3), "
        f"{result['agent_rss_mb']} MB (target < 80)"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
