"""The per-node agent: node and process metrics, logs, stacks, profiles, and the
node's task events, streamed to the dashboard over one gRPC stream.

Inputs: the raylet (framed transport: ``node_stats``, ``list_workers``, ``collect_references``)
and the node's core workers, which flush their task events to the agent's Unix socket
(``sockets/agent``, op ``task_events``; see ``ember.core_worker.event_export``). Output: the
stream to the dashboard (``ember.agent.wire``), reconnected with back-off; while it is
down, task events wait in a bounded buffer and what overflows is counted and reported.

The agent's death never stops a task: core workers only ``send`` to it (no reply awaited) and
drop their flush when it is away; the supervisor (``ember.raylet.child_supervisor``) starts it again.

Where it runs: on a node without the dashboard, as its own process (``main``), which the
raylet starts and restarts. On the head, inside the dashboard's process (``hub`` given): the
same work on the dashboard's loop, its messages handed to the hub in the JSON a remote agent
would send, with no second interpreter (~35 MB, the largest share of an idle node's memory) and no gRPC hop.
``child_supervisor.keep_running`` restarts it there when it fails.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import psutil
from ember.agent.fold_phases import fold_phases
from ember.agent.health_events import NodeHealth
from ember.agent.link import DashboardStream
from ember.agent.log_shipper import LogShipper
from ember.agent.logs import LogDir
from ember.agent.metrics import NodeSampler, ProcessSampler
from ember.cluster_token import user_token
from ember.core_worker.task_events import unpack_extra
from ember.process_util import signal_ready
from ember.protocol import connection as conn_mod
from ember.protocol.handler_table import handlers_from
from ember.protocol.messages.agent import AGENT
from ember.util.metrics import read_node_snapshots

STOP_DEADLINE_S = 5.0  # from SIGTERM to exit, at most
logger = logging.getLogger("ember.agent")
PERIOD = float(os.environ.get("EMBER_AGENT_PERIOD", "2.0"))
# Task events held while the dashboard is unreachable; past this the oldest batches go.
MAX_BUFFERED_EVENTS = int(os.environ.get("EMBER_AGENT_MAX_BUFFERED_EVENTS", "200000"))
_STATE = {
    "LEASED": "RUNNING",
    "ACTOR": "ACTOR",
    "IDLE": "IDLE",
    "STARTING": "STARTING",
    "DRIVER": "ALIVE",
}


class Agent(DashboardStream):
    def __init__(self, args: argparse.Namespace, hub: Any = None) -> None:
        """``hub``: the dashboard's ``AgentHub`` when this agent runs in its process."""
        self.args = args
        self.hub = hub
        self.node_id: str = args.node_id
        self.session_dir: str = args.session_dir
        self.logs = LogDir(os.path.join(args.session_dir, "logs"))
        self.sampler = NodeSampler()
        self.procs = ProcessSampler()
        self.raylet: Any = None
        self.token = _read_token(args.token_file)
        self.components: dict[int, str] = {}  # {pid: component} of the node's own processes
        for item in filter(None, (args.components or "").split(",")):
            name, _, pid = item.partition("=")
            if pid.isdigit():
                self.components[int(pid)] = name
        # In the dashboard's process the process is the dashboard (its cost includes ours).
        self.components[os.getpid()] = "agent" if hub is None else "dashboard"
        # Messages for the dashboard: replies first, then metrics, then task events.
        self.replies: deque[dict[str, Any]] = deque()
        self.events: deque[dict[str, Any]] = deque()
        self.buffered_events = 0
        self.events_dropped = 0  # since the last batch sent (the dashboard adds them up)
        self.events_dropped_total = 0  # by this agent's buffer, ever (its self-metrics)
        # The agent's own cost, which the head's agent cannot read off its process (it is the
        # dashboard's): CPU time of the sampling work, and the last sample's wall time.
        self.sample_cpu_s = 0.0
        self.sample_wall_s = 0.0
        self.latest_metrics: dict[str, Any] | None = None
        self.transfer_seq = 0  # the raylet's object transfers already shipped (timeline)
        self.wakeup = asyncio.Event()
        # Log disk, worker deaths, memory-monitor kills. A new agent reports the raylet's
        # last 100 kills again: its dashboard may be new too (a kill may precede both).
        self.health = NodeHealth(self.events, self.logs)
        # Every node but the head copies its logs to the head (``log_shipper``); the chunks
        # of one round wait here, after everything else the stream carries.
        self.shipper = None if args.head else LogShipper(self.logs)
        self.log_chunks: deque[dict[str, Any]] = deque()
        self.info = {
            "node_ip": args.node_ip,
            "hostname": socket.gethostname(),
            "is_head": args.head,
            "session_dir": args.session_dir,
            "agent_pid": os.getpid(),
            "start_time": self._node_start_time(),
        }
        self.stopping = False

    def _node_start_time(self) -> float:
        """When the node started: its raylet's start, not this agent's (a restarted agent
        would make the node look young)."""
        for pid, name in self.components.items():
            if name == "raylet":
                try:
                    return psutil.Process(pid).create_time()
                except psutil.Error:
                    break
        return time.time()

    # -- core workers' task events ---------------------------------------------------------
    def h_task_events(self, conn: Any, body: dict[str, Any]) -> None:
        # Only the ids are converted here; bytes inside ``extra`` (actor and worker ids) are
        # turned into hex by the JSON encoder's default hook, in C for everything else.
        # An owner's buffer keeps each event's extra packed into a tuple (task_events.py):
        # dicts again first, each the event's own, which folding completes in place.
        received = [
            e if type(e[4]) is not tuple else (e[0], e[1], e[2], e[3], unpack_extra(e[4]))
            for e in body["events"]
        ]
        events = [
            [tid.hex(), state, t, attempt, extra]
            for tid, state, t, attempt, extra in fold_phases(received)
        ]
        msg = {
            "type": "task_events",
            "job_id": _hex(body.get("job_id")),
            "worker_id": _hex(body.get("worker_id")),
            "events": events,
            "dropped": int(body.get("dropped") or 0),
            # Events folded into others: received all the same (the dashboard counts them).
            "folded": len(body["events"]) - len(events),
        }
        self.events.append(msg)
        self.buffered_events += len(events)
        while self.buffered_events > MAX_BUFFERED_EVENTS and len(self.events) > 1:
            old = self.events.popleft()
            if old["type"] != "task_events":
                continue  # a worker's error event: no task events in it
            self.buffered_events -= len(old["events"])
            # The events folded into the dropped ones are lost with them.
            self.events_dropped += len(old["events"]) + old["folded"] + old["dropped"]
            self.events_dropped_total += len(old["events"]) + old["folded"]
        self.wakeup.set()

    def h_task_events_sync(self, conn: Any, body: Any) -> None:
        """Every batch this connection sent before is in ``self.events``: nothing to do."""

    def h_error_event(self, conn: Any, body: dict[str, Any]) -> None:
        """A core worker's error event (a crashed task's traceback)."""
        self.events.append({"type": "event", **_jsonable(body)})
        self.wakeup.set()

    # -- periodic sample -------------------------------------------------------------------
    async def sample_loop(self) -> None:
        while not self.stopping:
            t0 = time.monotonic()
            try:
                self.latest_metrics = await self.collect()
                self.wakeup.set()
            except Exception:
                logger.exception("sampling failed")
            self.sample_wall_s = time.monotonic() - t0
            if self.stopping:
                # Stopping cancels this task, but a cancel that lands as the raylet's reply
                # does is swallowed by asyncio.wait_for (Python 3.11): without this check
                # the loop slept a whole period more and the raylet's stop grace ran out.
                return
            await asyncio.sleep(max(PERIOD - (time.monotonic() - t0), 0.1))

    async def ship_logs_loop(self) -> None:
        """A round of log chunks each period, once the last round is on its way (a stream
        that is down holds one round, no more)."""
        while not self.stopping:
            if not self.log_chunks:
                try:
                    self.log_chunks.extend(await asyncio.to_thread(self.shipper.round))
                except Exception:
                    logger.exception("reading the logs to ship failed")
                if self.log_chunks:
                    self.wakeup.set()
            await asyncio.sleep(PERIOD)

    async def collect(self) -> dict[str, Any]:
        cpu0 = time.thread_time()  # the loop's thread: nothing else runs until the await
        sample = self.sampler.sample()
        self.sample_cpu_s += time.thread_time() - cpu0
        workers: list[dict[str, Any]] = []
        stats: dict[str, Any] = {}
        raylet_workers: list[dict[str, Any]] = []
        if self.raylet is not None and not self.raylet.closed:
            try:
                stats = await self.raylet.call(
                    "node_stats",
                    {
                        "transfers_after": self.transfer_seq,
                        "oom_kills_after": self.health.oom_kill_seq,
                    },
                    timeout=5.0,
                )
                raylet_workers = await self.raylet.call("list_workers", None, timeout=5.0)
            except Exception as e:
                logger.warning("raylet did not answer: %s", e)
        if stats.get("pid") and stats["pid"] not in self.components:
            # The head's agent starts before its raylet, so learns the raylet's pid here.
            self.components[stats["pid"]] = "raylet"
            self.info["start_time"] = self._node_start_time()
        gcs_pid = stats.get("gcs_pid")
        if gcs_pid and gcs_pid not in self.components:
            # The head's raylet started the GCS again: the new process is the gcs_server.
            for pid in [p for p, name in self.components.items() if name == "gcs_server"]:
                del self.components[pid]
            self.components[gcs_pid] = "gcs_server"
        store = stats.get("store") or {}
        sample["object_store_used_bytes"] = store.get("used", store.get("used_bytes", 0))
        sample["object_store_capacity_bytes"] = store.get(
            "capacity", store.get("capacity_bytes", 0)
        )
        sample["object_store_objects"] = store.get("num_objects", store.get("objects", 0))
        # Spilling: what is on disk now, and what was written and read back so far.
        spill = stats.get("spill") or {}
        sample["object_store_spilled_bytes"] = store.get("spilled_bytes", 0)
        sample["object_store_spilled_objects"] = store.get("num_spilled", 0)
        sample["object_store_spilled_bytes_total"] = store.get("bytes_spilled_total", 0)
        sample["object_store_spilled_objects_total"] = store.get("num_spilled_total", 0)
        sample["object_store_restored_bytes_total"] = store.get("bytes_restored_total", 0)
        sample["object_store_restored_objects_total"] = store.get("num_restored_total", 0)
        sample["object_store_spill_write_seconds"] = spill.get("write_seconds", 0.0)
        sample["object_store_restore_read_seconds"] = spill.get("read_seconds", 0.0)
        by_pid: dict[int, dict[str, Any]] = {}
        for w in raylet_workers:
            if not w.get("pid"):
                continue
            title = w.get("title") or ""
            state = _STATE.get(w.get("state", ""), w.get("state", ""))
            kind = "driver" if w.get("is_driver") else "worker"
            # A host of shared-process actors holds many actors, none its own: its title
            # ("shared actors host (N actors)") is what it does.
            host = w.get("state") == "ACTOR" and not w.get("actor_id")
            by_pid[w["pid"]] = {
                "pid": w["pid"],
                "worker_id": w.get("worker_id"),
                "kind": kind,
                "component": kind,
                "state": state,
                "activity": title if host and title else _activity(state, title),
                "current_task": title if w.get("state") == "LEASED" else None,
                "actor_id": w.get("actor_id"),
                "actor_class": title if w.get("state") == "ACTOR" and not host else None,
                "job_id": w.get("job_id"),
                "blocked": w.get("blocked"),
            }
        for pid, name in self.components.items():
            by_pid.setdefault(
                pid,
                {
                    "pid": pid,
                    "worker_id": None,
                    "kind": name,
                    "component": name,
                    "state": "-",
                    "current_task": None,
                    "actor_class": None,
                },
            )
        # psutil reads a few /proc files per process (~0.7 ms each: 130 ms for 200 workers),
        # and the head's agent shares the dashboard's loop: so in a thread, as are the
        # metric snapshots. Only this coroutine uses the samplers, one call at a time.
        measured, user_metrics, log_index = await asyncio.to_thread(self._measure, list(by_pid))
        for pid, row in by_pid.items():
            if pid in measured:
                row.update(measured[pid])
                workers.append(row)
        self.health.report_exits(by_pid, stats.get("recent_exits") or (), self.stopping)
        monitor = stats.get("memory_monitor") or {}
        self.health.report_oom_kills(monitor)
        sample["oom_kills_total"] = monitor.get("kills_total", 0)
        sample["num_workers"] = sum(1 for w in workers if w["kind"] == "worker")
        sample["agent"] = self._self_metrics(measured.get(os.getpid(), {}))
        # ember.util.metrics: each process's snapshot file, shipped with the sample.
        sample["user_metrics"] = user_metrics
        sample["log_disk"] = self.health.check_log_disk()
        info = dict(self.info)
        if stats:
            info["resources_total"] = stats.get("resources_total", {})
            info["resources_available"] = stats.get("resources_available", {})
        transfers = stats.get("transfers") or []
        self.transfer_seq = stats.get("transfers_seq", self.transfer_seq)
        return {
            "type": "metrics",
            "time": time.time(),
            "transfers": transfers,
            "sample": sample,
            "workers": workers,
            "logs": log_index,
            "info": info,
        }

    def _self_metrics(self, me: dict[str, Any]) -> dict[str, Any]:
        """What the agent costs and holds. Its process's CPU and memory only when the process
        is its own: in the dashboard's process they are the dashboard's (ember_dashboard_*),
        and the sampling CPU time is what tells this agent's share."""
        out: dict[str, Any] = {
            "in_dashboard": self.hub is not None,
            "pid": os.getpid(),
            "sample_cpu_seconds": self.sample_cpu_s,
            "sample_seconds": self.sample_wall_s,
            "task_events_buffered": self.buffered_events,
            "task_events_dropped": self.events_dropped_total,
        }
        if self.hub is None:
            out["cpu_percent"] = me.get("cpu_percent")
            out["rss_bytes"] = me.get("rss_bytes")
        return out

    def _measure(self, pids: list[int]) -> tuple[dict[int, dict[str, Any]], list[Any], list[Any]]:
        cpu0 = time.thread_time()  # this worker thread's own CPU time: the sampling's cost
        out = (
            self.procs.sample(pids),
            read_node_snapshots(self.session_dir),
            self.logs.index(),
        )
        self.sample_cpu_s += time.thread_time() - cpu0
        return out

    # -- requests from the dashboard -------------------------------------------------------
    async def handle_request(self, msg: dict[str, Any]) -> None:
        rid, op, body = msg["rid"], msg["op"], msg.get("body") or {}
        try:
            result = await self.dispatch(op, body)
            reply = {"type": "reply", "rid": rid, "body": result}
        except Exception as e:
            reply = {"type": "reply", "rid": rid, "error": f"{op} on node {self.node_id[:12]}: {e}"}
        self.replies.append(reply)
        self.wakeup.set()

    async def dispatch(self, op: str, body: dict[str, Any]) -> Any:
        if op in ("log_tail", "log_read", "log_search"):
            return await self.logs.serve(op, body)
        if op == "stack":
            return await self.stacks(body.get("pids"))
        if op == "profile":
            from ember.agent import pyspy  # on demand: shutil, tempfile, ~0.6 MB idle

            return await pyspy.record(int(body["pid"]), int(body["duration"]), body["format"])
        if op == "objects":
            return await self.objects()
        raise ValueError(f"unknown agent op {op!r}")

    async def stacks(self, pids: list[int] | None) -> dict[str, Any]:
        rows = {w["pid"]: w for w in self.health.known_workers.values()}
        # What each runs now, asked of the raylet: the sample's list can be a second old, and
        # a stack taken just after a task started said its worker was idle.
        now: dict[int, str | None] = {}
        if self.raylet is not None and not self.raylet.closed:
            try:
                for w in await self.raylet.call("list_workers", None, timeout=5.0):
                    busy = w.get("state") in ("LEASED", "ACTOR")
                    now[w.get("pid")] = (w.get("title") or "a task") if busy else None
            except Exception as e:  # the sample's view is the best there is
                logger.info("raylet did not list its workers for stacks: %s", e)
        if pids is None:
            pids = [p for p, w in rows.items() if w["kind"] in ("worker", "driver")]
        from ember.agent import pyspy  # on demand, like profiles

        if pyspy.pyspy_path() is None:
            return {"error": pyspy.not_installed(), "processes": []}
        # Two at a time: each dump pauses its target briefly; the node keeps running.
        sem = asyncio.Semaphore(2)

        async def one(pid: int) -> dict[str, Any]:
            async with sem:
                res = await pyspy.dump(pid)
            w = rows.get(pid, {})
            return {
                **res,
                "kind": w.get("kind"),
                "worker_id": w.get("worker_id"),
                "current_task": now[pid]
                if pid in now
                else w.get("current_task") or w.get("actor_class"),
            }

        procs = await asyncio.gather(*(one(p) for p in pids))
        return {"error": None, "processes": list(procs)}

    async def objects(self) -> dict[str, Any]:
        if self.raylet is None or self.raylet.closed:
            raise ConnectionError("the agent is not connected to its raylet")
        res = await self.raylet.call("collect_references", None, timeout=15.0)
        rows = []
        for proc in res.get("processes", []):
            for r in proc.get("rows", []):
                for kind in r.get("reference_types") or ["LOCAL_REFERENCE"]:
                    rows.append(
                        {
                            "node_id": self.node_id,
                            "ip": res.get("node_ip"),
                            "pid": proc.get("pid"),
                            "worker_id": proc.get("worker_id"),
                            "is_driver": proc.get("is_driver"),
                            "actor": proc.get("actor") or None,
                            "object_id": r.get("object_id"),
                            "reference_type": kind,
                            "object_size": r.get("size"),
                            "status": r.get("status"),
                            "call_site": r.get("call_site"),
                        }
                    )
        return {"rows": rows, "unanswered": res.get("unanswered", 0), "store": res.get("store")}

    # -- lifecycle -------------------------------------------------------------------------
    async def serve_node(
        self, stop: asyncio.Event, on_ready: Callable[[str], None] | None = None
    ) -> None:
        """The agent's work until ``stop`` is set. A loop that ends on its own (a bug) ends
        this with its exception, so the supervisor starts a new agent."""
        sock = os.path.join(self.session_dir, "sockets", "agent")
        if os.path.exists(sock):
            os.unlink(sock)  # a previous agent's (this one restarted)
        server, _ = await conn_mod.serve(
            "unix:" + sock,
            handlers_from(AGENT, self),
            name="agent",
        )
        tasks: list[asyncio.Future] = []
        try:
            await self._connect_raylet(stop)
            tasks = [
                asyncio.ensure_future(self.sample_loop()),
                asyncio.ensure_future(self.dashboard_loop()),
            ]
            if self.shipper is not None:
                tasks.append(asyncio.ensure_future(self.ship_logs_loop()))
            if on_ready is not None:
                on_ready("unix:" + sock)
            stopped = asyncio.ensure_future(stop.wait())
            tasks.append(stopped)
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            if stopped not in done:
                for t in done:
                    t.result()  # re-raises what ended it
                raise RuntimeError("an agent loop ended by itself")
        finally:
            self.stopping = True
            for t in tasks:
                t.cancel()
            server.close()
            if self.raylet is not None:
                self.raylet.close()

    async def run(self) -> None:
        """The agent as its own process: stops on SIGTERM or SIGINT, within a deadline."""
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()

        def begin_stop() -> None:
            stop.set()
            # Stopping has a deadline: a stop that comes while this agent starts (its raylet
            # gone, _connect_raylet retrying) or a task that does not end when cancelled
            # (seen once: asyncio.run's cancellation waited for ever) must not leave an
            # orphan behind its dead raylet.
            watchdog = threading.Timer(STOP_DEADLINE_S, os._exit, (0,))
            watchdog.daemon = True
            watchdog.start()
            loop.call_later(1.0, _log_unfinished)

        def _log_unfinished() -> None:
            # What keeps a stop from finishing, for the next one who has to find out.
            for task in asyncio.all_tasks(loop):
                logger.warning("still running 1 s after SIGTERM: %r", task)

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, begin_stop)
        await self.serve_node(stop, lambda address: signal_ready(self.args.ready_fd, address))

    async def _connect_raylet(self, stop: asyncio.Event) -> None:
        deadline = time.monotonic() + 30.0
        while time.monotonic() < deadline and not stop.is_set():
            try:
                self.raylet = await conn_mod.connect(self.args.raylet_address, name="raylet")
                return
            except OSError:
                await asyncio.sleep(0.2)
        logger.error(
            "could not reach the raylet at %s; serving without it", self.args.raylet_address
        )


def _activity(state: str, title: str) -> str:
    """A worker's state as the issue words it: ``running <function>``, ``actor <Class>``,
    ``idle`` (else the state itself, lower-case: ``starting``)."""
    if state == "RUNNING":
        return f"running {title or 'a task'}"
    if state == "ACTOR":
        return f"actor {title or '(unknown class)'}"
    return state.lower()


def _hex(v: Any) -> str:
    return v.hex() if isinstance(v, bytes) else (v or "")


def _jsonable(v: Any) -> Any:
    if isinstance(v, bytes):
        return v.hex()
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_jsonable(x) for x in v]
    return v


def _read_token(path: str | None) -> str | None:
    if not path:
        return user_token()
    with open(path) as f:
        return f.read().strip() or None
