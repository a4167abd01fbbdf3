"""The core worker: the runtime inside every driver and worker process, wired from its parts.

Threads: the user's thread (or, in a worker, the main thread running tasks) calls ``put``,
``get``, ``submit_*``; one I/O thread runs a uvloop event loop with every connection (raylet,
GCS, leased workers, actors, owners and borrowers). State shared between them lives in the
thread-safe memory store and reference counter; everything else is touched on the I/O thread
only, reached with ``loop.call_soon_threadsafe``.

The parts, each in its own module and each given the core worker as a ``Protocol`` naming
exactly what it uses of it:
- ``objects`` (object_access.py): put, get, wait, futures;
- ``ownership`` (ownership.py): frees and borrowing; ``actors`` (created_actors.py): the
  lifetime of actors created here;
- ``tasks`` (task_manager.py): the owner's side of every task, from call to results;
  ``streams`` (generator_streams.py): the items of generator tasks as they arrive;
  ``task_submitter`` (leases, and the task state machine in task_attempts.py) and
  ``actor_submitter`` send them; ``lineage`` re-runs them to rebuild lost objects;
- ``links`` (cluster_links.py): other nodes; ``peers`` (peers.py): other core workers;
- ``task_events`` (task_events.py), exported to the node's agent by event_export.py;
- ``executor`` (executor.py), set by the worker main: runs tasks pushed to this worker.
This module creates them, connects this process to its raylet and the GCS, and routes
incoming ops to the part that serves them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import shlex
import sys
import threading
from collections import deque
from typing import Any

from ember import config, global_state
from ember.cluster_token import read_token
from ember.core_worker.actor_submitter import ActorSubmitter
from ember.core_worker.cluster_links import ClusterLinks
from ember.core_worker.created_actors import CreatedActors
from ember.core_worker.current_task import CurrentTask
from ember.core_worker.event_export import EventExporter
from ember.core_worker.generator_streams import GeneratorStreams
from ember.core_worker.lineage import Lineage
from ember.core_worker.memory_store import MemoryStore
from ember.core_worker.object_access import ObjectAccess
from ember.core_worker.own_replies import OwnReplies
from ember.core_worker.ownership import Ownership
from ember.core_worker.peers import Peers
from ember.core_worker.reference_counter import ReferenceCounter
from ember.core_worker.task_events import TaskEvents
from ember.core_worker.task_manager import TaskManager
from ember.core_worker.task_spec import TaskSpec
from ember.core_worker.task_submitter import TaskSubmitter
from ember.gcs_link import GcsLink
from ember.ids import new_task_id, new_unique_id
from ember.log_monitor import print_worker_lines
from ember.protocol import connection as conn_mod
from ember.protocol.connection import Connection
from ember.protocol.handler_table import handler_plan, handlers_from
from ember.protocol.messages.worker import WORKER as WORKER_CATALOGUE

logger = logging.getLogger(__name__)

DRIVER, WORKER = "driver", "worker"


# How often dropped ObjectRefs are applied outside tasks (seconds): soon after a drop, less
# and less often while none come.
DRAIN_PERIOD_MIN = 0.05
DRAIN_PERIOD_MAX = 1.0


async def _cancel_pending_tasks() -> None:
    """Ends what is still running on the loop (a lease request to a raylet that stopped
    answering, a close cut short by shutdown's deadline): a loop stopped with tasks pending
    prints "Task was destroyed but it is pending!" for each at exit."""
    me = asyncio.current_task()
    pending = [t for t in asyncio.all_tasks() if t is not me and not t.done()]
    for t in pending:
        t.cancel()
    if pending:
        await asyncio.wait(pending, timeout=0.5)


class CoreWorker:
    def __init__(
        self,
        *,
        mode: str,
        node: dict[str, Any],
        job_id: bytes,
        worker_id: bytes | None = None,
        namespace: str = "",
        log_to_driver: bool = True,
        register_extra: dict | None = None,
    ) -> None:
        self.mode = mode
        if mode == WORKER:
            config.apply_logging_level()  # the level ember.init() gave the node
        self.node = node  # {node_id, session_dir, raylet_address, gcs_address, arena_path, ...}
        self.node_id: bytes = node["node_id"]
        self.node_id_hex = self.node_id.hex()
        # The job and namespace of the task running now (set per task in a worker).
        self.job_id = job_id
        self.namespace = namespace
        self.worker_id = worker_id or new_unique_id()
        self.job_metadata: dict[str, str] = {}  # a driver's JobConfig metadata
        self.log_to_driver = log_to_driver
        # A driver's init(runtime_env=...) (and a submitted job's): what its tasks inherit.
        self.job_runtime_env: dict | None = None
        self.register_extra = register_extra or {}
        self.local_mode = False
        # Where the driver imports from, so workers can import what its functions reference
        # (Ray adds the driver's script and working directories to workers' sys.path too).
        self.code_path: list[str] = _driver_code_path() if mode == DRIVER else []
        self._actor_id: bytes | None = None
        self.address = f"unix:{node['session_dir']}/sockets/w-{self.worker_id.hex()[:16]}"
        self.owner_address = (self.worker_id, self.address, self.node_id)
        self.current = CurrentTask()  # .task_id, .actor_id, .spec (per async call too)
        self.root_task_id = new_task_id()
        self.shutting_down = False
        self.executor: Any = None  # set by the worker main
        self.raylet: Connection = None  # type: ignore[assignment]
        self.gcs: GcsLink = None  # type: ignore[assignment]
        self.io_thread: threading.Thread | None = None
        self._server: Any = None
        self.loop = loop = conn_mod.new_event_loop()
        self.memory_store = store = MemoryStore()
        # Ids of ObjectRefs garbage-collected since the last drain (appended lock-free).
        self.dropped_refs: deque[bytes] = deque()
        self.drain_asleep = False  # no drain is scheduled: a dropped ref wakes it
        self.task_events = TaskEvents(self.current, self.root_task_id)
        self.events = self.task_events.buffer  # read by the timeline and by tests

        # The parts. The reference counter calls back into ownership, which it needs in turn.
        wid = self.worker_id
        self.ownership = Ownership(
            self, worker_id=wid, node_id=self.node_id, memory_store=store, loop=loop
        )
        self.refs = ReferenceCounter(wid, self.ownership.on_free, self.ownership.on_borrow_released)
        self.ownership.refs = self.refs
        self.actors = CreatedActors(self, self.refs)
        self.objects = ObjectAccess(
            self,
            node=node,
            worker_id=wid,
            is_worker=mode == WORKER,
            current=self.current,
            memory_store=store,
            refs=self.refs,
            loop=loop,
        )
        self.tasks = TaskManager(
            self,
            worker_id=wid,
            current=self.current,
            memory_store=store,
            refs=self.refs,
            events=self.task_events,
            loop=loop,
        )
        self.handlers: dict[str, Any] = {}
        self.peers = Peers(wid, self.handlers, loop, self.refs.remove_borrower_everywhere)
        self.streams = GeneratorStreams(self, memory_store=store, refs=self.refs)
        self.task_submitter = TaskSubmitter(self)
        self.actor_submitter = ActorSubmitter(self)
        # A driver's threads read their own actor calls' and tasks' replies (own_replies.py),
        # when on.
        self.own_replies: OwnReplies | None = None
        if mode == DRIVER and config.own_reply_channel:
            self.own_replies = OwnReplies(self)
            self.actor_submitter.own = self.own_replies
            self.task_submitter.own = self.own_replies
            self.memory_store.wait_hook = self.own_replies.on_wait
        self.links = ClusterLinks(self)  # other nodes: spillback, pulls, deaths
        self.lineage = Lineage(self)  # how to re-run tasks whose results a node may lose

        # The parts' methods that callers reach on the core worker (the driver API, and the
        # parts through their Protocols), bound here so that a call costs no extra frame on
        # the hot paths.
        objects, tasks = self.objects, self.tasks
        self.put = objects.put
        self.get = objects.get
        self.wait = objects.wait
        self.object_future = objects.object_future
        self.wait_locations = objects.wait_locations
        self.materialize = objects.materialize
        self.read_plasma = objects.read_plasma
        self.forget_pin = objects.pins.forget
        self.store_serialized = objects.store_serialized
        self.new_pending_object = objects.new_pending_object
        self.fill_object = objects.fill_object
        self.encode_args = tasks.encode_args
        self.submit_task = tasks.submit_task
        self.submit_actor_task = tasks.submit_actor_task
        self.drop_submission_holds = tasks.drop_submission_holds
        self.inline_small_args = tasks.inline_small_args
        self.register_function = tasks.register_function
        self.attach_function = tasks.attach_function
        self.admit_limited_call = tasks.admit_limited_call
        self.handle_task_reply = tasks.handle_task_reply
        self.complete_task = tasks.complete_task
        self.fail_task = tasks.fail_task
        self.cancel = tasks.cancel
        self.record_event = self.task_events.record
        self.record_event_shared = self.task_events.record_shared
        self.record_attempt_failed = self.task_events.record_attempt_failed
        self.record_profile = self.task_events.record_profile
        self.register_new_borrows = self.ownership.register_new_borrows
        self.own_actor_handle_object = self.actors.own_handle_object
        self.create_actor = self.actors.create
        self.connect_to_worker = self.peers.connect_to_worker

        # The ops this process serves, on every connection (raylet, GCS, peers): every op of
        # the catalogue, from the parts' h_<op> methods (checked here, at start-up).
        self.handlers.update(
            handlers_from(
                WORKER_CATALOGUE,
                self,
                self.peers,
                objects,
                self.ownership,
                tasks,
                self.actors,
                self.links,
                self.streams,
            )  # in the order of handler_owner_types()
        )

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        ready = threading.Event()
        self.io_thread = threading.Thread(
            target=self._run_loop, args=(ready,), name="ember-io", daemon=True
        )
        self.io_thread.start()
        ready.wait(config.process_start_timeout)
        # This process's worker before it connects: once registered, the node may send work
        # that runs off the main thread (shared-process actors' calls, on their threads)
        # while this thread is still to return from the connect, and user code reaching
        # ``global_state.worker`` then must find it (finding none, it started a whole local
        # node inside the worker: ``current_worker``).
        global_state.worker = self
        try:
            self.run_sync(self._connect_all(), config.process_start_timeout)
        except BaseException:
            if global_state.worker is self:
                global_state.worker = None
            raise

    def _run_loop(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(ready.set)
        self.loop.call_soon(self._drain_periodically)
        self.loop.run_forever()

    def drain_dropped_refs(self) -> None:
        """Applies the local-count drops that ObjectRef.__del__ queued. Call with no lock held."""
        q = self.dropped_refs
        remove = self.refs.remove_local
        while q:
            try:
                object_id = q.popleft()
            except IndexError:
                return
            remove(object_id)

    def _drain_periodically(self, period: float = DRAIN_PERIOD_MIN) -> None:
        # Tasks drain as they start and end; this catches refs dropped in between. An idle
        # worker backs off, then stops until a ref is dropped (``wake_drain``): a node of
        # thousands of idle actors woke 20 times a second per actor, which took both CPUs
        # of a small machine.
        idle = not self.dropped_refs and self.mode == WORKER
        self.drain_dropped_refs()
        if self.shutting_down:
            return
        if self.own_replies is not None:
            self.own_replies.sweep()
        if idle and period >= DRAIN_PERIOD_MAX:
            self.drain_asleep = True
            if self.dropped_refs:  # dropped meanwhile, before the flag was seen
                self.wake_drain()
            return
        period = min(period * 2, DRAIN_PERIOD_MAX) if idle else DRAIN_PERIOD_MIN
        self.loop.call_later(period, self._drain_periodically, period)

    def wake_drain(self) -> None:
        """A ref was dropped while the drain slept: drain soon (any thread)."""
        if self.drain_asleep:
            self.drain_asleep = False
            self.loop.call_soon_threadsafe(self._drain_periodically)

    async def _connect_all(self) -> None:
        if self.node.get("token_file"):
            # A cluster node: callers on other nodes reach us over TCP, with the token.
            conn_mod.set_cluster_token(read_token(self.node["token_file"]))
            self.address = f"tcp:{self.node.get('node_ip', '127.0.0.1')}:0"
        self._server, self.address = await conn_mod.serve(
            self.address,
            self.handlers,
            name=f"{self.mode}-server",
            on_close=self.peers.on_peer_closed,
        )
        self.owner_address = (self.worker_id, self.address, self.node_id)
        self.raylet = await conn_mod.connect(
            self.node["raylet_address"],
            self.handlers,
            name="raylet",
            on_close=self._on_raylet_closed,
        )
        self.gcs = GcsLink(
            self.node["gcs_address"],
            self.handlers,
            on_reconnect=self._gcs_back,
            on_lost=self._on_gcs_lost,
            quiet=self.mode != DRIVER,
        )
        await self.gcs.connect(config.process_start_timeout)
        if self.node.get("token_file"):  # a cluster: other nodes' deaths matter here
            self.gcs.send("subscribe_node_events")
        await self.raylet.call(
            "register_client",
            {
                "worker_id": self.worker_id,
                "pid": os.getpid(),
                "address": self.address,
                "is_driver": self.mode == DRIVER,
                "job_id": self.job_id,
                "log_to_driver": self.log_to_driver,
                **self.register_extra,
            },
        )
        if self.mode == DRIVER:
            await self.gcs.call("register_job", self._job_registration())
            if self.links.wants_remote_logs():
                await self.links.subscribe_all_logs()
        # Task events to the node's agent, for the dashboard (event_export.py says how).
        self.event_exporter = EventExporter(self, self.task_events)
        self.event_exporter.start()

    def _job_registration(self) -> dict:
        return {
            "job_id": self.job_id,
            "driver_worker_id": self.worker_id,
            "driver_pid": os.getpid(),
            "node_id": self.node_id,
            "namespace": self.namespace,
            "entrypoint": _command_line(),
            "submission_id": os.environ.get("EMBER_JOB_SUBMISSION_ID", ""),
            **({"metadata": self.job_metadata} if self.job_metadata else {}),
        }

    async def _gcs_back(self, conn: Connection) -> None:
        """A new GCS process read the tables back: tell it what lived on this connection
        (the job, and what this process follows), so nothing here notices the restart."""
        if self.node.get("token_file"):
            conn.send("subscribe_node_events")
        if self.mode == DRIVER:
            await conn.call("register_job", self._job_registration(), timeout=10.0)
        self.actor_submitter.resubscribe(conn)

    def shutdown(self) -> None:
        if self.shutting_down:
            return
        self.shutting_down = True
        try:
            self.run_sync(self._close_all(), 5.0)
        except Exception:
            pass
        try:
            self.run_sync(_cancel_pending_tasks(), 1.0)
        except Exception:
            pass
        self.loop.call_soon_threadsafe(self.loop.stop)
        if self.io_thread is not None:
            self.io_thread.join(5.0)
            if not self.io_thread.is_alive():
                # Closed, or each init()/shutdown() of a process left its loop's descriptors
                # (epoll, eventfd, io_uring, a pipe pair): a test run of 1,000 tests passed
                # select()'s limit of 1,024.
                try:
                    self.loop.close()
                except Exception:  # a loop that will not close leaves only its descriptors
                    logger.debug("the I/O loop did not close", exc_info=True)
        if global_state.worker is self:
            global_state.worker = None

    async def _close_all(self) -> None:
        self.task_submitter.release_all()
        exporter = getattr(self, "event_exporter", None)
        if exporter is not None:
            await exporter.stop()  # flushes: a short driver's last events reach the agent
        if self.mode == DRIVER and self.gcs is not None and not self.gcs.closed:
            try:
                await self.gcs.call("job_finished", {"job_id": self.job_id}, timeout=2.0)
            except Exception:
                pass
        for c in list(self.peers.conns.values()) + [self.raylet, self.gcs]:
            if c is not None:
                c.close("shutdown")
        self.links.close()
        if self._server is not None:
            self._server.close()
        if self.address.startswith("unix:"):
            try:
                os.unlink(self.address[len("unix:") :])
            except OSError:
                pass

    def run_sync(self, coro, timeout: float | None) -> Any:
        """Runs a coroutine on the I/O thread and waits for it (from any other thread): its
        result, or its exception raised here; TimeoutError (after cancelling it) when it
        takes longer than ``timeout``; concurrent.futures.CancelledError when it was
        cancelled. A lock to sleep on rather than ``run_coroutine_threadsafe``'s future:
        every worker runs this on its way up, and the future's machinery (a condition,
        two futures chained) wrote to pages it shares with its zygote."""
        done = threading.Lock()
        done.acquire()
        box: list[asyncio.Task] = []

        def start() -> None:
            task = self.loop.create_task(coro)
            box.append(task)
            task.add_done_callback(lambda _t: done.release())

        self.loop.call_soon_threadsafe(start)
        if not done.acquire(timeout=-1 if timeout is None else timeout):
            self.loop.call_soon_threadsafe(lambda: box[0].cancel())  # after start: FIFO
            raise TimeoutError(f"no answer within {timeout} s")
        task = box[0]
        if task.cancelled():
            raise concurrent.futures.CancelledError()
        return task.result()

    def call_raylet_sync(self, op: str, body: Any, timeout: float = 30.0) -> Any:
        if self.dropped_refs:
            self.drain_dropped_refs()  # frees go out before this call, on the same connection
        return self.run_sync(self.raylet.call(op, body), timeout)

    def call_gcs_sync(self, op: str, body: Any, timeout: float | None = None) -> Any:
        if self.dropped_refs:
            self.drain_dropped_refs()
        limit = timeout or config.gcs_rpc_timeout
        if not self.gcs.connected:  # restarting: wait for it as long as the link tries
            limit += self.gcs.reconnect_timeout
        return self.run_sync(self.gcs.call(op, body), limit)

    def _on_raylet_closed(self, conn: Connection) -> None:
        if not self.shutting_down and self.mode == DRIVER:
            self.links.on_node_lost(conn.close_reason)
        if not self.shutting_down and self.mode == WORKER:
            # The node is going away; a worker has nothing left to do.
            logger.info("raylet connection closed (%s); worker exiting", conn.close_reason)
            os._exit(0)

    def _on_gcs_lost(self, reason: str) -> None:
        """The GCS did not come back within the reconnect timeout (``gcs_link``)."""
        if not self.shutting_down and self.mode == DRIVER:
            self.links.on_gcs_lost(reason)

    # -- what every part may use -----------------------------------------------------------
    def blocked_in_get(self) -> bool:
        """Whether this worker's task waits in get/wait with its CPU lent out."""
        return self.objects.blocked_waits > 0

    def current_task_id(self) -> bytes:
        return getattr(self.current, "task_id", None) or self.root_task_id

    def owns(self, object_id: bytes) -> bool:
        ref = self.refs.get(object_id)
        return ref is not None and ref.owned

    def send_threadsafe(self, conn: Connection | None, op: str, body: Any) -> None:
        """Sends from any thread; nothing once the loop is closed (interpreter shutdown)."""
        if conn is None or self.loop.is_closed():
            return
        try:
            conn.send_threadsafe(op, body)
        except RuntimeError:
            pass  # loop closed during interpreter shutdown

    def give_back_queued(self) -> None:
        """The running task waits in get or wait: the tasks its owner pushed behind it go
        back unstarted (``Executor.give_back_all``)."""
        executor = self.executor
        if executor is not None and executor.held and not self.loop.is_closed():
            self.loop.call_soon_threadsafe(executor.give_back_all)

    def gcs_send_threadsafe(self, op: str, body: Any) -> None:
        self.send_threadsafe(self.gcs, op, body)

    @property
    def actor_id(self) -> bytes | None:
        """The actor this code runs in: this worker's own, or in a host of shared-process
        actors the running call's (each guest is an actor of its own)."""
        executor = self.executor
        if executor is not None and executor.shared is not None:
            return self.current.actor_id
        return self._actor_id

    @actor_id.setter
    def actor_id(self, actor_id: bytes | None) -> None:
        self._actor_id = actor_id

    def current_actor_hex(self) -> str:
        return self.actor_id.hex() if self.actor_id else ""

    @property
    def events_dropped(self) -> int:
        return self.task_events.dropped

    # -- worker side: handlers that the executor serves ------------------------------------
    def _h_push_task(self, conn: Connection, fields: dict):
        spec = TaskSpec.from_wire(fields)
        if spec.generator:
            spec.stream_conn = conn  # its items go back on it (generators.py)
        return self.executor.on_push_task(conn, spec)

    def _h_push_actor_task(self, conn: Connection, fields: dict):
        spec = TaskSpec.from_wire(fields)
        if spec.generator:
            spec.stream_conn = conn
        return self.executor.on_push_actor_task(conn, spec)

    def _h_serve_on_thread(self, conn: Connection, body: Any) -> bool:
        executor = self.executor
        return config.serve_on_thread and executor is not None and executor.serve_on_thread(conn)

    def _h_create_actor(self, conn: Connection, spec: TaskSpec):
        return self.executor.on_create_actor(conn, spec)

    def _h_cancel_task(self, conn: Connection, body: dict) -> None:
        if self.executor is not None:
            self.executor.cancel(body["task_id"], body.get("force", False))
            if body.get("recursive", True):
                self.tasks.cancel_children(body["task_id"])

    def _h_exit(self, conn: Connection, body: dict) -> None:
        if self.executor is not None:
            self.executor.request_exit(body or {})

    def _h_drop_actor(self, conn: Connection, body: dict) -> bool:
        shared = self.executor.shared if self.executor is not None else None
        if shared is not None:
            shared.end({**body, "force": True})
        return True

    # -- messages for the user -------------------------------------------------------------
    def _h_log_lines(self, conn: Connection, body: dict) -> None:
        print_worker_lines(body)

    def _h_warning(self, conn: Connection, body: dict) -> None:
        print(f"(ember) Warning: {body['message']}", file=sys.stderr, flush=True)

    def _h_get_references(self, conn: Connection, body: Any) -> dict:
        return {
            "pid": os.getpid(),
            "worker_id": self.worker_id.hex(),
            "is_driver": self.mode == DRIVER,
            "actor": self.executor.actor_name if self.executor is not None else "",
            "rows": self.ownership.reference_table(),
        }


def handler_owner_types() -> tuple[type, ...]:
    """The types whose ``h_<op>`` methods serve a core worker's ops, in the order
    ``CoreWorker.__init__`` passes their instances to ``handlers_from``."""
    return (
        CoreWorker,
        Peers,
        ObjectAccess,
        Ownership,
        TaskManager,
        CreatedActors,
        ClusterLinks,
        GeneratorStreams,
    )


def prepare_for_fork() -> None:
    """Work every worker would do on its way to its first task, done once in the zygote
    before it forks, so that children share the result instead of each copying the pages
    the work writes to (``zygote.py``)."""
    handler_plan(WORKER_CATALOGUE, handler_owner_types())


def _driver_code_path() -> list[str]:
    paths = [os.getcwd()]
    if sys.argv and sys.argv[0]:
        paths.append(os.path.dirname(os.path.abspath(sys.argv[0])))
    paths.extend(p for p in sys.path if p and os.path.isdir(p))
    seen: set[str] = set()
    return [p for p in paths if not (p in seen or seen.add(p))]


def _command_line() -> str:
    """The driver process's command line, as Ray's job table has it (``python script.py``,
    not only ``script.py``); POSIX-quoted, where Ray quotes as Windows does."""
    try:
        with open("/proc/self/cmdline", "rb") as f:
            args = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:  # not Linux
        args = [sys.executable, *sys.argv]
    return shlex.join(args)
