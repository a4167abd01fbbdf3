"""A dashboard state filled through the same ingestion calls the agents' stream makes
(``AgentHub.ingest``), for the dashboard's in-process tests. Its own module, not conftest:
``from conftest import`` finds whichever conftest was imported first (tests/cluster's)."""

from __future__ import annotations

import warnings

from ember.dashboard.agent_hub import AgentHub, AgentLink
from ember.dashboard.state import DashboardState

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

__all__ = ["NODE", "TestClient", "fill"]

NODE = "aa" * 16


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
            "workers": [{"pid": 11, "worker_id": "w1", "kind": "worker", "state": "IDLE"}],
            "logs": [
                {
                    "name": "raylet.log",
                    "component": "raylet",
                    "pid": None,
                    "worker_id": None,
                    "size": 10,
                    "mtime": 1.0,
                    "stream": "log",
                }
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
                        "actor_id": f"{i:032x}",
                        "class_name": "Counter" if i % 3 else "Other",
                        "name": f"c{i}" if i % 5 == 0 else "",
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
