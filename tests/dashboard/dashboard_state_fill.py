"""A dashboard state filled through the same ingestion calls the agents' stream makes
(``AgentHub.ingest``), for the dashboard's in-process tests. Its own module, not conftest:
``from conftest import`` finds whichever conftest was imported first (tests/cluster's)."""

from __future__ import annotations

import warnings
from types import SimpleNamespace
from typing import Any

from ember.agent.logs import describe
from ember.dashboard.agent_hub import AgentHub, AgentLink
from ember.dashboard.gcs_client import _actor_row
from ember.dashboard.state import DashboardState
from ember.gcs.actor_machine import ActorInfo
from ember.gcs.placement_groups import _Group

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

__all__ = ["NODE", "TestClient", "fill", "gcs_actor_row"]

NODE = "aa" * 16


def gcs_actor_row(i: int) -> dict[str, Any]:
    """Actor ``i`` as the dashboard's GCS poll receives it: the GCS's own ``ActorInfo.public``,
    ids made hex (so the rows' shape is the GCS's, not a copy of it)."""
    spec = SimpleNamespace(
        actor_id=i.to_bytes(16, "big"),
        actor_options={
            "class_name": "Counter" if i % 3 else "Other",
            "name": f"c{i}" if i % 5 == 0 else "",
        },
        owner=(bytes([1]) * 16, "127.0.0.1:1", bytes.fromhex(NODE)),
        job_id=bytes.fromhex("01000000"),
        resources={"CPU": 1.0},
        parent_task_id=bytes([3]) * 16,
        strategy=None,
    )
    return _actor_row(ActorInfo(spec).public())


def fill(state: DashboardState, n_tasks: int = 300, n_actors: int = 30) -> None:
    hub = AgentHub(state)
    link = AgentLink(NODE)
    hub.ingest(
        link,
        {
            "type": "metrics",
            "time": 100.0,
            "info": {"node_ip": "10.0.0.1", "hostname": "h1", "is_head": True},
            "sample": {"cpu_percent": 12.0, "mem_used_bytes": 1000},
            "workers": [
                # A worker as the agent reports one (``Agent.collect``), and a component.
                {
                    "pid": 11,
                    "worker_id": "w1",
                    "kind": "worker",
                    "component": "worker",
                    "state": "IDLE",
                    "activity": "idle",
                    "current_task": None,
                    "actor_id": None,
                    "actor_class": None,
                    "job_id": "01000000",
                    "blocked": False,
                    "cpu_percent": 0.5,
                    "rss_bytes": 50_000_000,
                    "start_time": 90.0,
                    "uptime_s": 10.0,
                    "uss_bytes": 40_000_000,
                    "num_open_files": 12,
                },
                {"pid": 20, "kind": "raylet", "component": "raylet", "state": "-"},
            ],
            # The agent's log index: ``describe`` of the name, its size and mtime.
            "logs": [
                {**describe(name), "size": 10, "mtime": 1.0}
                for name in ("raylet.log", "raylet.log.1", "worker-" + "ab" * 14 + "-11.err")
            ],
        },
    )
    for i in range(n_actors):
        hub.ingest(
            link,
            {
                "type": "actors",
                "actors": [
                    {
                        **gcs_actor_row(i),
                        "state": "DEAD" if i % 10 == 9 else "ALIVE",
                        "node_id": NODE,
                        "pid": 1000 + i,
                        "death_cause": "killed" if i % 10 == 9 else "",
                    }
                ],
            },
        )
    events = []
    for i in range(n_tasks):
        tid = f"{i:032x}"
        name = "rare" if i % 100 == 7 else "common"
        events.append([tid, "PENDING_ARGS_AVAIL", 1.0 + i, 0, {"name": name}])
        final = "FAILED" if name == "rare" else "FINISHED"
        events.append(
            [
                tid,
                final,
                2.0 + i,
                0,
                {
                    "timings": {"start": 1.5 + i, "end": 2.0 + i},
                    "pid": 11,
                    "error": "boom" if final == "FAILED" else None,
                },
            ]
        )
    hub.ingest(link, {"type": "task_events", "job_id": "01000000", "events": events, "dropped": 0})
    state.cluster = {"placement_groups": placement_groups()}


def placement_groups() -> list[dict[str, Any]]:
    """The GCS's records (``cluster_info``) of a placed group and a pending one."""
    placed = _Group({"pg_id": b"\x01" * 16, "bundles": [{"CPU": 1.0}], "job_id": b"\x01"})
    placed.placement = [bytes.fromhex(NODE)]
    placed.track.fire("reserved")
    waiting = _Group(
        {"pg_id": b"\x02" * 16, "bundles": [{"GPU": 1.0}], "name": "gpu", "strategy": "SPREAD"}
    )
    waiting.reason = "no node has GPU: 1"
    return [placed.public(), waiting.public()]
