"""The dashboard's in-memory state: what the agents and the GCS reported, bounded by ``Caps``.

This is the one store every router reads and every ingestion path (agent streams, the GCS
poller) writes. It does no I/O and runs on the dashboard's event loop only, so it takes no
locks. Ids are lowercase hex strings everywhere here.

Public interface (the routers, Prometheus and timeline modules use these):
- ``nodes``        {node_id: NodeEntry}          ``update_node``, ``node_metrics``, ``node_lost``
- ``workers``      {node_id: {pid: dict}}        ``set_workers``
- ``actors``       {actor_id: dict}              ``update_actor``
- ``tasks``        TaskTable (records + events)  ``add_task_events``
- ``objects``      {node_id: [row]}              ``set_objects``
- ``logs``         {node_id: [file dict]}        ``set_log_index``
- ``events``       deque of error/cluster events ``add_event``
- ``history``      History (30 min per node and for the cluster)
- ``cluster``      the GCS's cluster_info         ``set_cluster``
- ``autoscaler``   the autoscaler's status record ``autoscaler.apply`` (dashboard/autoscaler)
- ``serve``        Serve's recent request-metrics records ``serve.add`` (dashboard/serve/view)
- ``pubsub``       the live stream's fan-out
- ``dropped``      {what: count} of everything dropped past a cap
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Any

from ember.dashboard.autoscaler.view import AutoscalerView
from ember.dashboard.config import Caps
from ember.dashboard.current_tasks import CurrentTasks
from ember.dashboard.history import History, UserMetricHistory
from ember.dashboard.pubsub import PubSub
from ember.dashboard.schemas import WORKERS
from ember.dashboard.serve.view import ServeMetrics
from ember.dashboard.task_table import TaskTable
from ember.trace.store import TimelineStore

# The GCS's actor states, as the dashboard shows them.
_ACTOR_STATE = {
    "PENDING_CREATION": "PENDING",
    "DEPENDENCIES_UNREADY": "PENDING",
    "PENDING": "PENDING",
    "ALIVE": "ALIVE",
    "RESTARTING": "RESTARTING",
    "DEAD": "DEAD",
}
MIN_NODE_PREFIX = 4
_WORKER_KEYS = WORKERS.fields


class NodeIdError(LookupError):
    """A node id that names no node (``status`` 404) or a prefix of several (400)."""

    def __init__(self, status: int, message: str, candidates: list[str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.candidates = candidates or []


class NodeEntry:
    """What the dashboard knows of one node: identity, liveness and the latest metrics."""

    def __init__(self, node_id: str, now: float) -> None:
        self.node_id = node_id
        self.info: dict[str, Any] = {}  # node_ip, hostname, is_head, resources, session_dir...
        self.state = "ALIVE"
        self.start_time = now
        self.last_seen = now
        self.metrics: dict[str, Any] = {}  # the latest sample (psutil, per core, disks, ...)
        self.lost_reason = ""

    def public(self, workers: int) -> dict[str, Any]:
        return {
            "node_id": self.node_id,
            "node_ip": self.info.get("node_ip"),
            "hostname": self.info.get("hostname"),
            "state": self.state,
            "is_head": bool(self.info.get("is_head")),
            "start_time": self.info.get("start_time", self.start_time),
            "last_seen": self.last_seen,
            "cpu_percent": self.metrics.get("cpu_percent"),
            "mem_used_bytes": self.metrics.get("mem_used_bytes"),
            # A dead node's processes are gone: none count as live workers (its last figures
            # stay in ``metrics``, with ``last_seen`` saying how old they are).
            "num_workers": workers if self.state == "ALIVE" else 0,
            "resources_total": self.info.get("resources_total", {}),
            "resources_available": self.info.get("resources_available", {}),
            "lost_reason": self.lost_reason or None,
        }


class DashboardState:
    def __init__(self, caps: Caps | None = None) -> None:
        self.caps = caps or Caps()
        # "Now" for every time the state stamps and every window a route reads back from now:
        # the wall clock live; a history replay sets it to each record's time, then leaves
        # it at the session's end (``set_clock``).
        self.clock: Callable[[], float] = time.time
        self.started = time.time()
        # Where what the state ingests is also written, to outlive the cluster
        # (``history_writer.HistoryWriter.record``); None: not kept.
        self.recorder: Callable[[str, dict[str, Any]], None] | None = None
        self.nodes: dict[str, NodeEntry] = {}
        self.workers: dict[str, dict[int, dict[str, Any]]] = {}  # {node_id: {pid: worker}}
        self.actors: dict[str, dict[str, Any]] = {}  # {actor_id: row}
        # Grows whenever an actor row changes or goes, so a view built from the table (the
        # Actors page's creator tree) can be reused until it does.
        self.actors_version = 0
        self._actor_calls: dict[str, list[int]] = {}  # {actor_id: [submitted, finished]}
        self._actor_by_worker: dict[str, str] = {}  # {worker_id: actor_id}, for creators
        # {actor_id: its incarnations whose creation attempt's row says where it ran}.
        self._creations_placed: dict[str, int] = {}
        # {worker_id: node_id} of every worker seen; bounded by forgetting a node's on loss.
        self._worker_node: dict[str, str] = {}
        self.tasks = TaskTable(self.caps.max_tasks)
        self.current = CurrentTasks(self.tasks)  # what each worker runs now
        self.objects: dict[str, list[dict[str, Any]]] = {}  # {node_id: [memory rows]}
        self.objects_time: dict[str, float] = {}
        self.logs: dict[str, list[dict[str, Any]]] = {}  # {node_id: [{path, component...}]}
        self.events: deque[dict[str, Any]] = deque(maxlen=self.caps.max_events)
        self.history = History(self.caps.history_seconds, self.caps.history_period)
        self.user_history = UserMetricHistory(self.caps.history_seconds, self.caps.history_period)
        self.cluster: dict[str, Any] = {}
        self.autoscaler = AutoscalerView()  # what the autoscaler's monitor says, if one runs
        self.serve = ServeMetrics()  # Serve's request counters, the newest records
        self.gcs_polled = False  # the GCS's node table has been read: it decides node deaths
        self.pubsub = PubSub(self.caps.stream_queue)
        self.dropped: dict[str, int] = {
            "tasks": 0,
            "actors": 0,
            "events": 0,
            "nodes": 0,
            "workers": 0,
            "objects": 0,
            "agent_task_events": 0,  # what the core workers' bounded buffers dropped
            "late_task_events": 0,  # events of tasks already evicted past the cap
        }
        self.ingested = {"task_events": 0, "batches": 0}
        self.timeline = TimelineStore()  # parents, argument producers, profile spans
        # Ended jobs: {job_id: end time} until their open tasks are failed, then the set of
        # those done (as many as the GCS's job table holds).
        self._jobs_ending: dict[str, float] = {}
        self._jobs_ended: set[str] = set()

    def set_clock(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.tasks.clock = clock

    def record(self, kind: str, body: dict[str, Any]) -> None:
        """Hands what was ingested to the history writer, if there is one."""
        if self.recorder is not None:
            self.recorder(kind, body)

    # -- nodes -----------------------------------------------------------------------------
    def update_node(self, node_id: str, info: dict[str, Any]) -> NodeEntry:
        node = self.nodes.get(node_id)
        if node is None:
            if len(self.nodes) >= self.caps.max_nodes:
                self._evict_dead_node()
            node = self.nodes[node_id] = NodeEntry(node_id, self.clock())
            self.pubsub.publish({"type": "node", "node_id": node_id, "state": "ALIVE"})
        node.info.update(info)
        if node.state != "ALIVE":
            node.state = "ALIVE"
            node.lost_reason = ""
            self.pubsub.publish({"type": "node", "node_id": node_id, "state": "ALIVE"})
        node.last_seen = self.clock()
        return node

    def _evict_dead_node(self) -> None:
        for nid, node in self.nodes.items():
            if node.state != "ALIVE":
                self.forget_node(nid)
                self.dropped["nodes"] += 1
                return
        raise OverflowError(
            f"the dashboard tracks at most {self.caps.max_nodes} nodes; raise "
            "EMBER_DASHBOARD_MAX_NODES"
        )

    def forget_node(self, node_id: str) -> None:
        self.nodes.pop(node_id, None)
        for w in self.workers.pop(node_id, {}).values():
            self._worker_node.pop(w.get("worker_id") or "", None)
            self.current.forget(w.get("worker_id") or "")
        self.objects.pop(node_id, None)
        self.history.forget(node_id)

    def node_metrics(self, node_id: str, t: float, sample: dict[str, Any]) -> None:
        node = self.update_node(node_id, {})
        node.metrics = sample
        self.history.add(node_id, t, sample)
        self.pubsub.publish({"type": "node_metrics", "node_id": node_id, "time": t, **sample})
        self._cluster_sample(t)
        if self.user_history.due(t):
            self.user_history.add(
                t,
                [
                    snap
                    for n in self.nodes.values()
                    if n.state == "ALIVE" and n.metrics
                    for snap in n.metrics.get("user_metrics") or ()
                ],
            )

    def _cluster_sample(self, t: float) -> None:
        # The cluster's series is the sum (CPU: the mean) over live nodes, sampled once per
        # history period whichever node reported last.
        ring = self.history.rings.get("cluster")
        if ring and t - ring[-1][0] < self.caps.history_period * 0.9:
            return
        live = [n.metrics for n in self.nodes.values() if n.state == "ALIVE" and n.metrics]
        if not live:
            return
        total: dict[str, Any] = {}
        for m in live:
            for k, v in m.items():
                if isinstance(v, int | float) and not isinstance(v, bool):
                    total[k] = total.get(k, 0) + v
        if "cpu_percent" in total:
            total["cpu_percent"] = total["cpu_percent"] / len(live)
        self.history.add("cluster", t, total)

    def agent_gone(self, node_id: str) -> None:
        """A node's agent disconnected. With the GCS polled, the node stays as the GCS has it
        (an agent restarted on a live node is no node loss; a node that died is declared by
        the GCS with its reason, ``reconcile_nodes``); without, this is all there is to go on."""
        if not self.gcs_polled:
            self.node_lost(node_id, "its agent disconnected")
            return
        self.add_event(
            "WARNING",
            f"agent of node {node_id[:12]} disconnected: the node's metrics, logs and stacks "
            "are unavailable until it reconnects",
            source="dashboard",
            node_id=node_id,
            kind="AGENT_DISCONNECTED",
        )

    def reconcile_nodes(self, gcs_nodes: list[dict[str, Any]]) -> None:
        """The GCS's node table (each poll): a node it declared dead is lost, with its reason."""
        self.gcs_polled = True
        for n in gcs_nodes:
            nid = n.get("node_id") or ""
            if not nid or n.get("state") != "DEAD":
                continue
            if nid not in self.nodes:
                # It died before its agent ever reported. Not past the cap: the GCS keeps
                # every dead node, and evicting one to add another each poll would churn.
                if len(self.nodes) >= self.caps.max_nodes:
                    continue
                self.update_node(
                    nid, {k: n.get(k) for k in ("node_ip", "hostname", "is_head") if n.get(k)}
                )
            reason = n.get("death_reason") or "no reason given"
            self.node_lost(nid, f"the GCS declared it dead: {reason}")

    def node_lost(self, node_id: str, reason: str) -> None:
        node = self.nodes.get(node_id)
        if node is None or node.state != "ALIVE":
            return
        node.state = "DEAD"
        node.lost_reason = reason
        self.add_event(
            "WARNING",
            f"node {node_id[:12]}: {reason}",
            source="dashboard",
            node_id=node_id,
            kind="NODE_LOST",
        )
        self.pubsub.publish({"type": "node", "node_id": node_id, "state": "DEAD", "reason": reason})

    def node_row(self, node_id: str) -> dict[str, Any]:
        return self.nodes[node_id].public(len(self.workers.get(node_id, ())))

    def resolve_node_id(self, node_id: str) -> str:
        """The full id of a node given in full or by a unique prefix of at least
        ``MIN_NODE_PREFIX`` characters (the CLI prints 16), any case. Every endpoint that takes
        a node id resolves it here; ``NodeIdError`` says why not (the routes answer 404 for an
        unknown id, 400 for an ambiguous prefix, naming the candidates)."""
        key = node_id.strip().lower()
        if key in self.nodes:
            return key
        matches = (
            sorted(n for n in self.nodes if n.startswith(key))
            if len(key) >= MIN_NODE_PREFIX
            else []
        )
        if len(matches) == 1:
            return matches[0]
        if matches:
            shown = ", ".join(matches[:10]) + (", ..." if len(matches) > 10 else "")
            raise NodeIdError(
                400,
                f"node id prefix {node_id!r} matches {len(matches)} nodes ({shown}); "
                "give more characters",
                matches,
            )
        short = (
            f" (a prefix needs at least {MIN_NODE_PREFIX} characters)"
            if len(key) < MIN_NODE_PREFIX
            else ""
        )
        raise NodeIdError(404, f"no node {node_id!r}{short}; GET /api/nodes lists the nodes")

    # -- workers ---------------------------------------------------------------------------
    def set_workers(self, node_id: str, workers: list[dict[str, Any]]) -> None:
        cap = self.caps.max_workers_per_node
        if len(workers) > cap:
            self.dropped["workers"] += len(workers) - cap
            workers = workers[:cap]
        table = {}
        for w in workers:
            # A node's components lack a worker's fields (activity, job, actor) and a quick
            # sample lacks USS and open files: every row gets every declared field.
            for k in _WORKER_KEYS:
                if k not in w:
                    w[k] = None
            w["node_id"] = node_id
            table[w["pid"]] = w
            if w.get("worker_id"):
                self._worker_node[w["worker_id"]] = node_id
        self.workers[node_id] = table

    def all_workers(self) -> list[dict[str, Any]]:
        """Every node's workers, each naming the task it runs now (``current_tasks``)."""
        view = self.current.view
        return [view(w) for table in self.workers.values() for w in table.values()]

    def node_workers(self, node_id: str) -> list[dict[str, Any]]:
        """A node's workers by pid, each naming the task it runs now."""
        rows = sorted(self.workers.get(node_id, {}).values(), key=lambda w: w["pid"])
        return [self.current.view(w) for w in rows]

    # -- actors ----------------------------------------------------------------------------
    def update_actor(self, row: dict[str, Any]) -> None:
        actor_id = row["actor_id"]
        row = dict(row)
        row["state"] = _ACTOR_STATE.get(row.get("state", ""), row.get("state", "PENDING"))
        old = self.actors.get(actor_id)
        if old is None:
            if len(self.actors) >= self.caps.max_actors:
                self._evict_actor()
            old = self.actors[actor_id] = {"actor_id": actor_id}
        changed = old.get("state") != row["state"]
        # What a waiting actor lacks changes as resources come and go: news for the pages too.
        news = changed or old.get("pending_reason") != row.get(
            "pending_reason", old.get("pending_reason")
        )
        # The GCS poll repeats every row each second: only a real change counts.
        if any(old.get(k) != v for k, v in row.items()):
            self.actors_version += 1
        old.update(row)
        old.setdefault("incarnations", [])  # a GCS from before they were listed
        old.setdefault("creation_task_id", None)
        old.setdefault("shared_process", False)
        if self._creations_placed.get(actor_id, -1) < len(old["incarnations"]):
            self._place_creations(old)
        name = old.get("name") or ""
        old["title"] = f"{old.get('class_name', '')}({name})" if name else old.get("class_name", "")
        if old.get("worker_id"):
            self._actor_by_worker[old["worker_id"]] = actor_id
        if changed and old["state"] == "DEAD":
            cause = old.get("death_cause") or "no cause given"
            self.add_event(
                "WARNING",
                f"actor {old.get('title') or actor_id} died: {cause}",
                source="gcs",
                node_id=old.get("node_id"),
                pid=old.get("pid"),
                kind="ACTOR_DIED",
                job_id=old.get("job_id"),
            )
        if news:
            self.pubsub.publish(
                {
                    "type": "actor",
                    "actor_id": actor_id,
                    "state": old["state"],
                    "class_name": old.get("class_name"),
                }
            )

    def _place_creations(self, actor: dict[str, Any]) -> None:
        """Where each incarnation's constructor ran, from the GCS, into its creation task's
        attempt row when that lacks it: a worker killed with its node within a second of
        the constructor never sent its own events."""
        task_id = actor.get("creation_task_id")
        if not task_id:
            return
        lives = [*actor["incarnations"]]
        if actor.get("state") in ("ALIVE", "DEAD") and actor.get("node_id"):
            lives.append(actor)  # the live (or last) one
        done = -1
        for attempt, life in enumerate(lives):
            if not self.tasks.place(task_id, attempt, life):
                break  # not in the table yet: asked again on the next poll
            done = attempt
        self._creations_placed[actor["actor_id"]] = done

    def _evict_actor(self) -> None:
        # Dead actors go first; a live one is only dropped when every kept actor is alive.
        victim = next((a for a, r in self.actors.items() if r.get("state") == "DEAD"), None)
        if victim is None:
            victim = next(iter(self.actors))
        self.actors.pop(victim)
        self.actors_version += 1
        self._actor_calls.pop(victim, None)
        self._creations_placed.pop(victim, None)
        self.dropped["actors"] += 1

    def actor_row(self, actor_id: str) -> dict[str, Any]:
        row = dict(self.actors[actor_id])
        submitted, finished = self._actor_calls.get(actor_id, (0, 0))
        row["executed_calls"] = finished
        row["pending_calls"] = max(submitted - finished, 0)
        owner = row.get("owner_worker_id")
        row["creator_actor_id"] = self._actor_by_worker.get(owner) if owner else None
        return row

    def placement_group_rows(self) -> list[dict[str, Any]]:
        """``schemas.PlacementGroup`` rows from the GCS's records (``_Group.public``)."""
        return [_placement_group_row(pg) for pg in self.cluster.get("placement_groups") or ()]

    # -- tasks -----------------------------------------------------------------------------
    def add_task_events(
        self,
        node_id: str,
        job_id: str,
        events: list[list[Any]],
        dropped_at_source: int = 0,
        folded: int = 0,
    ) -> None:
        """Ingests one owner's batch: ``[[task_id, state, time, attempt, extra], ...]``;
        ``folded``: how many of the owner's events the agent folded into these
        (``agent/fold_phases.py``), counted as received."""
        tasks = self.tasks
        before = tasks.dropped
        changed: dict[str, int] = {}
        for task_id, state, t, attempt, extra in events:
            if state == "PROFILE":
                continue  # profile spans are the timeline's, not the task table's
            if extra:
                ran_on = self._where(node_id, state, extra)
                job = extra.get("job_id") or job_id  # the executing worker's events say
            else:
                ran_on, job = None, job_id
            ended = tasks.ended
            ends_before = ended["FINISHED"] + ended["FAILED"]
            slot = tasks.apply(task_id, state, t, attempt, extra, job_id=job, node_id=ran_on)
            if slot < 0:
                continue  # a late event of a task evicted past the cap (counted there)
            if state == "RUNNING" and extra and extra.get("worker_id"):
                self.current.started(extra["worker_id"], slot)
            actor_id = tasks.cols["actor_id"][slot]
            # Its method calls: the constructor (run again on each restart) is not one.
            if actor_id and not tasks.cols["name"][slot].endswith(".__init__"):
                calls = self._actor_calls.setdefault(actor_id, [0, 0])
                if state == "PENDING_ARGS_AVAIL" or (extra and "t_pending" in extra):
                    calls[0] += 1  # submitted (an end with its submission folded in, too)
                elif state == "RETRYING":
                    calls[1] -= 1  # the end of the attempt before it did not end the call
                # A call is done when an attempt of it ends (once: two accounts of one end,
                # the worker's and the owner's, are one end).
                calls[1] += ended["FINISHED"] + ended["FAILED"] - ends_before
            error = tasks.cols["error"][slot]
            if state == "FAILED" and error:
                self.add_event(
                    "ERROR",
                    f"task {tasks.cols['name'][slot] or task_id} failed: "
                    f"{error.strip().splitlines()[-1] if error.strip() else ''}",
                    source="task",
                    node_id=tasks.cols["node_id"][slot] or node_id,
                    pid=tasks.pid[slot] or None,
                    kind="TASK_FAILED",
                    detail=error,
                    job_id=tasks.cols["job_id"][slot] or None,
                )
            changed[state] = changed.get(state, 0) + 1
        self.dropped["tasks"] += tasks.dropped - before
        self.dropped["late_task_events"] = tasks.late_dropped
        self.dropped["agent_task_events"] += dropped_at_source
        self.timeline.ingest(node_id, job_id, events)
        self.ingested["task_events"] += len(events) + folded
        self.ingested["batches"] += 1
        if changed:
            self.pubsub.publish(
                {
                    "type": "tasks",
                    "node_id": node_id,
                    "events": changed,
                    "counts": self.tasks_counts(),
                }
            )

    def _where(self, owner_node: str, state: str, extra: dict[str, Any]) -> str | None:
        """The node a task ran on: its worker's, its actor's, or the owner node's pid."""
        wid = extra.get("worker_id")
        if wid and wid in self._worker_node:
            return self._worker_node[wid]
        aid = extra.get("actor_id")
        # Only a running call is on its actor's node now: the actor may restart elsewhere
        # before a pending one runs, or have done so since an ended one ran.
        if aid and aid in self.actors and state == "RUNNING":
            return self.actors[aid].get("node_id")
        pid = extra.get("pid")
        if pid and pid in self.workers.get(owner_node, ()):
            return owner_node
        return None

    # -- jobs ------------------------------------------------------------------------------
    def update_jobs(self, jobs: list[dict[str, Any]], now: float | None = None) -> int:
        """The GCS's job table (ids as hex). A job whose driver is gone has tasks nothing will
        report again: once ``caps.job_end_grace`` has passed since it ended, its tasks not in
        a final state are FAILED, as Ray's GCS does. Returns how many were failed."""
        now = self.clock() if now is None else now
        for job in jobs:
            job_id = job.get("job_id")
            if job.get("state") != "FINISHED" or not job_id or job_id in self._jobs_ended:
                continue
            self._jobs_ending.setdefault(job_id, float(job.get("end_time") or now))
        failed = 0
        for job_id, ended in list(self._jobs_ending.items()):
            if now < ended + self.caps.job_end_grace:
                continue
            del self._jobs_ending[job_id]
            self._jobs_ended.add(job_id)
            failed += self.tasks.fail_open_tasks(
                job_id,
                ended,
                f"Job finishes ({job_id}) as driver exits. Marking all non-terminal tasks as "
                "failed.",
                "WORKER_DIED",
            )
        if failed:
            self.pubsub.publish(
                {"type": "tasks", "events": {"FAILED": failed}, "counts": self.tasks_counts()}
            )
        return failed

    def tasks_counts(self) -> dict[str, int]:
        return dict(self.tasks.counts["state"])

    # -- objects, logs, events -------------------------------------------------------------
    def set_objects(self, node_id: str, rows: list[dict[str, Any]]) -> None:
        cap = self.caps.max_objects_per_node
        if len(rows) > cap:
            self.dropped["objects"] += len(rows) - cap
            rows = rows[:cap]
        self.objects[node_id] = rows
        self.objects_time[node_id] = self.clock()

    def set_log_index(self, node_id: str, files: list[dict[str, Any]]) -> None:
        for f in files:
            f["node_id"] = node_id
        self.logs[node_id] = files

    def add_event(
        self,
        severity: str,
        message: str,
        *,
        source: str,
        node_id: str | None = None,
        pid: int | None = None,
        kind: str = "",
        detail: str | None = None,
        t: float | None = None,
        job_id: str | None = None,
    ) -> None:
        if len(self.events) == self.events.maxlen:
            self.dropped["events"] += 1
        ev = {
            "time": t or self.clock(),
            "severity": severity,
            "source": source,
            "node_id": node_id,
            "job_id": job_id or None,
            "pid": pid,
            "kind": kind,
            "message": message,
            "detail": detail,
        }
        self.events.append(ev)
        self.pubsub.publish({"type": "event", **ev})


def _placement_group_row(pg: dict[str, Any]) -> dict[str, Any]:
    nodes = pg.get("bundle_nodes") or []
    state = pg.get("state") or "PENDING"
    return {
        "placement_group_id": pg.get("placement_group_id") or "",
        "name": pg.get("name") or "",
        "state": state,
        "strategy": pg.get("strategy") or "PACK",
        "job_id": pg.get("job_id") or "",
        "detached": bool(pg.get("detached")),
        "pending_reason": (
            (pg.get("reason") or None) if state in ("PENDING", "RESCHEDULING") else None
        ),
        "created_at": pg.get("created_at"),
        "bundles": [
            {"index": i, "resources": b, "node_id": nodes[i] if i < len(nodes) else None}
            for i, b in enumerate(pg.get("bundles") or [])
        ],
    }
