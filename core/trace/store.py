"""What the timeline keeps beyond the task table: per task its parent, submitter and argument
producers (for flow arrows), ``ember.profile`` spans and object transfers between nodes, each
bounded (the oldest goes first and is counted), fed from the same task-event batches as the
task table. ``Filters`` says which tasks a trace keeps. The dashboard's timeline route and
``ember.timeline()`` (``chrome_trace``) both write from here (``ember.trace.writer``).

Flow arrows to a producer need its location: a bounded map of the most recent ``FLOW_WINDOW``
tasks, so an arrow whose producer is older than that is counted, not drawn.
"""

from __future__ import annotations

import os
from collections import OrderedDict, deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

FLOW_WINDOW = int(os.environ.get("EMBER_TIMELINE_FLOW_WINDOW", "100000"))
MAX_FLOW_RECORDS = int(os.environ.get("EMBER_TIMELINE_MAX_FLOW_RECORDS", "200000"))
MAX_SPANS = int(os.environ.get("EMBER_TIMELINE_MAX_SPANS", "200000"))
MAX_TRANSFERS = int(os.environ.get("EMBER_TIMELINE_MAX_TRANSFERS", "100000"))
# Instant events of the cluster itself (the autoscaler's scaling decisions): a few a minute.
MAX_MARKS = int(os.environ.get("EMBER_TIMELINE_MAX_MARKS", "10000"))
TASK_ID_HEX = 32  # an object id's first 16 bytes are its producing task's id (ember.ids)


@dataclass
class Filters:
    job_id: str | None = None
    node_id: str | None = None
    since: float | None = None  # wall-clock seconds; tasks ending before are left out
    until: float | None = None  # tasks starting after are left out
    waits: bool = True  # each task's wait for resources, as an async slice

    def keeps(self, job_id: str | None, node_id: str | None, start: float, end: float) -> bool:
        if self.job_id and (job_id or "") != self.job_id:
            return False
        if self.node_id and (node_id or "") != self.node_id:
            return False
        if self.since is not None and end < self.since:
            return False
        return not (self.until is not None and start > self.until)


class TimelineStore:
    """What the timeline needs beyond the task table, fed from the same task-event batches
    (``ingest``): per task its parent, submitter and argument producers; profile spans;
    object transfers. Every part is capped; the oldest goes first and is counted."""

    def __init__(self) -> None:
        # {task_id: (parent_task_id, owner_node_id, owner_pid, (producer task ids...))}
        self.flows: OrderedDict[str, tuple] = OrderedDict()
        self.spans: deque[dict[str, Any]] = deque(maxlen=MAX_SPANS)
        self.transfers: deque[dict[str, Any]] = deque(maxlen=MAX_TRANSFERS)
        self.marks: deque[dict[str, Any]] = deque(maxlen=MAX_MARKS)
        self.dropped = {"flows": 0, "spans": 0, "transfers": 0, "marks": 0}
        self._interned: dict[str, str] = {}

    def ingest(self, node_id: str, job_id: str, events: Iterable[list | tuple]) -> None:
        """One owner's batch of task events (``[task_id, state, time, attempt, extra]``)."""
        for task_id, state, t, _attempt, extra in events:
            if not extra:
                continue
            if state == "PROFILE":
                self.add_span(node_id, job_id, task_id, t, extra)
            elif state in ("FINISHED", "FAILED") and "parent" in extra:
                self.add_flow(
                    task_id,
                    extra.get("parent") or "",
                    node_id,
                    extra.get("owner_pid"),
                    extra.get("arg_tasks") or (),
                )

    def add_flow(
        self,
        task_id: str,
        parent: str,
        owner_node: str,
        owner_pid: int | None,
        producers: Iterable[str],
    ) -> None:
        flows = self.flows
        if task_id not in flows and len(flows) >= MAX_FLOW_RECORDS:
            flows.popitem(last=False)
            self.dropped["flows"] += 1
        # Parents and submitting nodes repeat across siblings: keep one string of each.
        parent = self._interned.setdefault(parent, parent) if parent else ""
        if len(self._interned) > MAX_FLOW_RECORDS:
            self._interned.clear()
        flows[task_id] = (parent, owner_node, owner_pid, tuple(producers))

    def add_span(
        self, node_id: str, job_id: str, task_id: str, start: float, event: dict[str, Any]
    ) -> None:
        if len(self.spans) == self.spans.maxlen:
            self.dropped["spans"] += 1
        data = event.get("extra") or {}
        self.spans.append(
            {
                "node_id": node_id,
                "job_id": job_id,
                "task_id": task_id,
                "pid": event.get("pid"),
                "name": str(data.get("name", event.get("event_type", "profile"))),
                "cat": str(event.get("event_type", "profile")),
                "start": start,
                "end": event.get("end", start),
                "args": {str(k): str(v) for k, v in data.items()},
                "cname": data.get("cname"),
            }
        )

    def add_mark(self, row: str, name: str, cat: str, t: float, args: dict[str, str]) -> None:
        """An instant event on the trace's row ``row`` (a process of its own, named by the
        writer's labels): something that happened to the cluster at ``t``, not in a task."""
        if len(self.marks) == self.marks.maxlen:
            self.dropped["marks"] += 1
        self.marks.append({"row": row, "name": name, "cat": cat, "time": t, "args": args})

    def add_transfer(self, transfer: dict[str, Any]) -> None:
        """{object_id, from_node, to_node, size, start, end}: one cross-node object copy."""
        if len(self.transfers) == self.transfers.maxlen:
            self.dropped["transfers"] += 1
        self.transfers.append(dict(transfer))
