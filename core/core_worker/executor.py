"""The worker side: runs tasks, actor constructors and actor methods, and sends back results.

Normal tasks and the calls of a plain actor run one at a time on the process's main thread, in
the order they arrived (so one caller's calls run in order). A threaded actor
(``max_concurrency > 1``) runs calls on a pool of that many threads; an async actor runs them
as coroutines on its own event loop, at most ``max_concurrency`` at once. Each concurrency
group has its own pool or event loop (``concurrency_groups``).
"""

from __future__ import annotations

import asyncio
import ctypes
import inspect
import logging
import os
import queue
import signal
import sys
import threading
import time
from typing import Any, Protocol

import cloudpickle
from ember import config
from ember import runtime_env_packages as packages
from ember.core_worker import actor_exits, generators, task_replies, task_values
from ember.core_worker.call_threads import CallThreads
from ember.core_worker.concurrency_groups import ConcurrencyGroups, Lane, UnknownGroup
from ember.core_worker.current_task import enter_async_call, leave_async_call
from ember.core_worker.locations import error_location
from ember.core_worker.log_offsets import LogOffsets
from ember.core_worker.method_lookup import actor_method
from ember.core_worker.process_limits import LimitWatch
from ember.core_worker.served_channels import ServedChannels
from ember.core_worker.shared_actors import SharedActors
from ember.core_worker.task_runtime_env import applied_env
from ember.core_worker.task_spec import (
    ACTOR_CREATION_TASK,
    ACTOR_TASK,
    ARG_INLINE,
    TaskSpec,
)
from ember.exceptions import (
    ActorDiedError,
    ActorExit,
    RuntimeEnvSetupError,
    TaskCancelledError,
    TaskError,
    exit_cause,
)
from ember.protocol.connection import DEFERRED, Connection, Deferred, new_event_loop

logger = logging.getLogger(__name__)

# A normal task its owner pushed behind a running one (``TaskSpec.behind``: pipelined) waits
# at most this long for its turn; then it goes back to its owner unstarted, to run elsewhere
# (a long task ahead would otherwise hold it).
HOLD_QUEUED_S = 0.002


class ExecutorHost(task_values.ValuesHost, Protocol):
    """What the executor needs of the rest of the core worker (besides what a task's values
    need). It sets ``job_id``, ``namespace`` and ``actor_id`` (the task running now; the
    actor constructed here) and ``code_path`` (the driver's import dirs, for the tasks this
    worker submits)."""

    node: dict[str, Any]
    node_id_hex: str
    job_id: bytes
    namespace: str
    actor_id: bytes | None
    code_path: list[str]
    current: threading.local  # .task_id, .spec, .is_actor, .actor_id, .profile_spans
    raylet: Connection
    task_events: Any  # TaskEvents: RUNNING is appended to it directly (the hot path)

    def call_gcs_sync(self, op: str, body: Any, timeout: float | None = None) -> Any: ...
    def current_actor_hex(self) -> str: ...
    def record_event(self, spec: TaskSpec, state: str, **extra: Any) -> None: ...
    def send_threadsafe(self, conn: Connection, op: str, body: Any) -> None: ...


class Executor:
    def __init__(self, host: ExecutorHost) -> None:
        self.host = host
        self.queue: queue.SimpleQueue = queue.SimpleQueue()
        self.functions: dict[bytes, Any] = {}  # {function_id: callable}
        self.actor: Any = None
        self._actor_spec: TaskSpec | None = None
        # Whether this actor is a restart, asked of the GCS on first use: the constructor
        # the GCS sends again is the first one's spec, so only the GCS knows.
        self.actor_restarted: bool | None = None
        self.actor_name = ""
        self.pool: CallThreads | None = None
        self.lane: Lane | None = None  # an async actor's default group: its loop and limit
        self.running: dict[bytes, int] = {}  # {task_id: thread ident}
        self.cancelled: set[bytes] = set()
        self.exiting = False
        self.exit_reason = ""  # why the actor ends on purpose (exit_actor, sys.exit, ...)
        self.groups: ConcurrencyGroups | None = None  # an actor's concurrency groups
        # An async actor's calls, to cancel: {task_id: (its loop, its asyncio task)}.
        self.async_calls: dict[bytes, tuple[asyncio.AbstractEventLoop, asyncio.Future]] = {}
        self._bound: dict[str, Any] = {}  # {method name: the actor's bound method}
        # CUDA_VISIBLE_DEVICES as the worker started, and whether a task has changed it since.
        self._gpus_at_start = os.environ.get("CUDA_VISIBLE_DEVICES")
        self._gpus_set = False
        self._adopted: set[str] = set()  # the driver import dirs already on sys.path
        self.limits = LimitWatch()  # a task's setrlimit does not outlive it (process_limits)
        self.tasks_done = 0
        self.interrupt_pending: bytes | None = None
        self.calls_per_function: dict[bytes, int] = {}
        self._omp_threads: str | None = None  # the OMP_NUM_THREADS this worker set last
        self._running_extra: dict[str, dict[str, Any]] = {}  # {task name: its RUNNING extra}
        # A worker's stdout and stderr are its log files (worker_main): each reply then says
        # which bytes of them its task wrote.
        self.log_offsets: LogOffsets | None = None
        # The shared-process actors this worker hosts, when it is their host (shared_actors).
        self.shared: SharedActors | None = None
        # Tasks pushed behind a running one, not started yet: {task_id: their reply}. Whoever
        # pops one first has it: the main thread (runs it) or the I/O thread (gives it back).
        self.held: dict[bytes, Deferred] = {}
        # Callers' own channels this thread reads itself, once one asked (served_channels).
        self.served: ServedChannels | None = None

    # -- on the I/O thread -----------------------------------------------------------------
    def on_push_task(self, conn, spec: TaskSpec) -> object:
        reply_to = conn.deferred()
        if spec.behind:
            self.held[spec.task_id] = reply_to
            conn.loop.call_later(HOLD_QUEUED_S, self.give_back, spec.task_id)
        self._put((spec, reply_to))
        return DEFERRED

    def _put(self, item: Any) -> None:
        served = self.served
        if served is None:
            self.queue.put(item)
        else:
            served.put(item)

    def serve_on_thread(self, conn) -> bool:
        """A caller asks that this thread read its channel (served_channels): yes when this
        thread is the one that runs its calls, in order."""
        if (
            self.pool is not None
            or self.lane is not None
            or self.groups is not None
            or self.shared is not None
            or self.exiting
            or conn.transport is None
            or conn._fd < 0
        ):
            return False
        if self.served is None:
            self.served = ServedChannels(self.queue)
        self.served.adopt(conn)
        return True

    def give_back(self, task_id: bytes) -> bool:
        """On the I/O thread: a held task goes back to its owner unstarted, if still held
        (False: the main thread took it first, or it was never held)."""
        reply_to = self.held.pop(task_id, None)
        if reply_to is None:
            return False
        reply_to.resolve({"returned": True})
        return True

    def give_back_all(self) -> None:
        """On the I/O thread: the running task blocks in get or wait, perhaps on one of the
        tasks held behind it, which must not wait for it."""
        for task_id in list(self.held):
            self.give_back(task_id)

    def on_create_actor(self, conn, spec: TaskSpec) -> object:
        if (spec.actor_options or {}).get("shared_process"):
            if self.shared is None:
                self.shared = SharedActors(self)
            return self.shared.on_create(conn, spec)
        self._put((spec, conn.deferred()))
        return DEFERRED

    def on_push_actor_task(self, conn, spec: TaskSpec) -> object:
        if self.shared is not None:
            return self.shared.on_call(conn, spec)
        reply_to = conn.deferred()
        group = spec.concurrency_group
        if group and self.groups is not None:
            try:
                self.groups.check(group)
            except UnknownGroup as e:
                reply_to.resolve(self.error_reply(spec, self._task_error(spec, e), app=False))
                return DEFERRED
            if self.groups.is_async:
                lane = self.groups.lanes[group]
                lane.loop.call_soon_threadsafe(self._start_async_call, spec, reply_to, lane)
            else:
                self.groups.pools[group].submit(self._run_and_reply, spec, reply_to)
        elif self.lane is not None:
            self.lane.loop.call_soon_threadsafe(self._start_async_call, spec, reply_to, self.lane)
        elif self.pool is not None:
            self.pool.submit(self._run_and_reply, spec, reply_to)
        else:
            self._put((spec, reply_to))
        return DEFERRED

    def request_exit(self, body: dict) -> None:
        """Graceful exit (the actor's handles are gone): after the calls already queued.

        ``force`` (``ember.kill``): now, with no atexit handlers, as Ray 2.x's ``ray.kill``
        ("atexit handlers installed in the actor will not be run"; an exit that runs them is
        ``__ray_terminate__`` or ``exit_actor``); calls in flight fail. Only the output
        already printed is flushed. In a host of shared-process actors, only the actor named.
        """
        if self.shared is not None:
            self.shared.end(body)
            return
        if body.get("force"):
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(1)
        self._put(("exit", body))

    def cancel(self, task_id: bytes, force: bool) -> None:
        if self.give_back(task_id):  # not started: its owner fails it when it comes back
            return
        self.cancelled.add(task_id)
        call = self.async_calls.get(task_id)
        if call is not None:  # an async actor's call: CancelledError inside it
            loop, future = call
            loop.call_soon_threadsafe(future.cancel)
            return
        ident = self.running.get(task_id)
        if ident is None or self.actor is not None or self.shared is not None:
            return  # a threaded actor's running call is not interrupted (Ray's rule)
        if force:
            os._exit(1)
        if ident == threading.main_thread().ident:
            # A signal also wakes the main thread from a blocking call such as time.sleep.
            self.interrupt_pending = task_id
            signal.pthread_kill(ident, signal.SIGINT)
            return
        # Other threads: raise KeyboardInterrupt at the thread's next bytecode.
        ctypes.pythonapi.PyThreadState_SetAsyncExc(
            ctypes.c_ulong(ident), ctypes.py_object(KeyboardInterrupt)
        )

    def install_interrupt_handler(self) -> None:
        """SIGINT in a worker means "cancel the running task" (``ember.cancel``): the task
        sees KeyboardInterrupt, as in Ray, and its caller TaskCancelledError."""

        def on_sigint(signum, frame) -> None:
            pending, self.interrupt_pending = self.interrupt_pending, None
            if pending is not None and pending in self.running:
                raise KeyboardInterrupt

        signal.signal(signal.SIGINT, on_sigint)

    # -- on the main thread ----------------------------------------------------------------
    def run(self) -> None:
        """The worker's main loop: runs queued work until told to exit."""
        while True:
            served = self.served
            item = self.queue.get() if served is None else served.take()
            if item is None:
                return
            if item[0] == "adopt":  # (taken from the plain queue: the first channel)
                self.queue.put(item)
                continue
            if item[0] == "exit":
                if served is not None and served.drain():
                    self.queue.put(item)  # after the calls the channels held
                    continue
                self._exit_actor(item[1].get("reason", "exit requested"))
                return
            spec, reply_to = item
            if spec.behind and self.held.pop(spec.task_id, None) is None:
                continue  # given back to its owner meanwhile
            self._run_and_reply(spec, reply_to)
            if self.exiting:
                return

    def _run_and_reply(self, spec: TaskSpec, reply_to: Deferred) -> None:
        reply = self.execute(spec)
        retire = self._reached_max_calls(spec)
        if self.limits.changed and spec.kind == 0 and not self.limits.restore():
            retire = True  # a hard limit the task lowered cannot be raised again
        if retire:
            reply["worker_exiting"] = True
        # Calls waiting to run: their replies follow, so this one joins a batched write
        # (never the last words of a worker about to exit).
        batch = not (retire or self.exiting or self.held) and (
            self.queue.qsize() > 0 or (self.pool is not None and self.pool.waiting())
        )
        # A task held behind this one runs next: this reply must be out first, or a crash
        # of that task would lose it and this task would be retried (or failed) as if cut.
        reply_to.resolve_threadsafe(reply, batch, settled=bool(self.held))
        if retire:
            # max_calls: this worker has run the function enough times; a fresh one follows.
            time.sleep(0.05)
            self._drain_owned()
            os._exit(0)
        if self.exiting and spec.kind == ACTOR_TASK:
            self._exit_actor(self.exit_reason)

    def execute(self, spec: TaskSpec) -> dict:
        host = self.host
        current = host.current
        current.task_id = spec.task_id
        current.spec = spec
        current.is_actor = spec.kind != 0
        if spec.job_id:
            host.job_id = spec.job_id
            host.namespace = spec.namespace
        self.running[spec.task_id] = threading.get_ident()
        if spec.gpu_ids:
            os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in spec.gpu_ids)
            self._gpus_set = True
        elif self._gpus_set and spec.kind != ACTOR_TASK:
            # A reused worker: the last task's GPUs are not this task's nor this actor's.
            self._restore_gpus()
        timings: dict[str, float] = {"start": time.time()}
        log_from = self.log_offsets.now() if self.log_offsets is not None else None
        self._record_running(spec, log_from)
        current.profile_spans = spans = []
        # A task's runtime_env is its own for its run; an actor's, for its life (kept).
        env = None
        try:
            if spec.runtime_env and spec.kind != ACTOR_TASK:
                env = applied_env(spec, self)
            if spec.kind != ACTOR_TASK:
                self._set_omp_threads(spec)
            if spec.task_id in self.cancelled:
                raise TaskCancelledError(spec.task_id.hex())
            fn = self._load(spec)
            args, kwargs = self.resolve_args(spec)
            timings["args_ready"] = time.time()
            if spec.kind == ACTOR_CREATION_TASK:
                self._construct_actor(spec, fn, args, kwargs)
                result = None
            else:
                result = fn(*args, **kwargs)
                if inspect.iscoroutine(result):
                    result = asyncio.run(result)
                if spec.generator:
                    result = generators.run(self, spec, result)
            timings["executed"] = time.time()
            if isinstance(result, generators.PartialReturns):
                reply = self._partial_reply(spec, result)
            else:
                reply = self.store_returns(spec, result)
        except SystemExit as e:
            # exit_actor(), __ray_terminate__ or sys.exit(0) in a method: the actor ends on
            # purpose after this call; any other sys.exit() is its crash (_crash). In a task,
            # sys.exit() ends the worker, a crash the caller sees as WorkerCrashedError.
            if isinstance(e, ActorExit) or spec.kind == ACTOR_TASK:
                self._crash_unless_intended(spec, e)
                reply = self._exit_reply(spec, e)
            elif spec.kind == ACTOR_CREATION_TASK:
                reply = self.error_reply(spec, self._task_error(spec, e), app=True)
            else:
                actor_exits.task_exit(spec.display_name(), e.code)
                raise  # (not reached: the process is gone)
        except BaseException as e:  # noqa: BLE001 - every failure goes back to the caller
            if isinstance(e, TaskCancelledError):
                reply = self.error_reply(spec, TaskCancelledError(spec.task_id.hex()), app=False)
            elif isinstance(e, KeyboardInterrupt) and spec.task_id in self.cancelled:
                reply = self._cancelled_reply(spec, e)
            elif isinstance(e, KeyboardInterrupt | SystemExit):
                reply = self.error_reply(spec, self._task_error(spec, e), app=True)
            elif isinstance(e, TaskError) and getattr(e, "_from_arg", False):
                reply = self.error_reply(spec, e, app=False)  # an upstream failure, as is
            elif isinstance(e, RuntimeEnvSetupError):
                reply = self.error_reply(spec, e, app=False)  # Ray's class, never retried
            else:
                reply = self.error_reply(spec, self._task_error(spec, e), app=True)
        finally:
            if env is not None and spec.kind == 0:
                env.restore()
            self.running.pop(spec.task_id, None)
            current.task_id = None
            current.spec = None
            current.profile_spans = None
        if spans:
            reply["profile"] = spans
        self.tasks_done += 1
        if log_from is None:  # else stamp flushes them, before it asks where the files end
            sys.stdout.flush()
            sys.stderr.flush()
        task_replies.stamp(reply, timings, host, self.log_offsets, log_from)
        if spec.kind == ACTOR_CREATION_TASK:
            self._record_creation_end(spec, reply)
        else:
            host.task_events.ended_here(spec.task_id)
        return reply

    def _drain_owned(self) -> None:
        """Before a retiring worker exits: what it owns and others still use (a task's
        returned refs to its own child tasks' results) stays served until released, as Ray's
        workers drain, up to ``config.worker_drain_seconds``. The raylet, told first, never
        leases it again and does not kill it for lingering meanwhile."""
        refs = self.host.refs

        def owns_in_use() -> bool:
            return any(ref.owned and ref.in_use() for _, ref in refs.snapshot())

        if not owns_in_use():
            return
        self.host.send_threadsafe(
            self.host.raylet, "worker_draining", {"worker_id": self.host.worker_id}
        )
        deadline = time.monotonic() + config.worker_drain_seconds
        while owns_in_use() and time.monotonic() < deadline:
            time.sleep(0.05)

    def _set_omp_threads(self, spec: TaskSpec) -> None:
        """As Ray does for a task or an actor: OpenMP (numpy's and torch's thread pools) gets
        as many threads as CPUs it was given (at least 1; an actor without CPUs 1), unless
        the user set OMP_NUM_THREADS (their environment, or the runtime_env's env_vars,
        applied before this). The value stays set between tasks, as ours, and is written only
        when a task's CPUs differ from the last's: no environment write per task."""
        have = os.environ.get("OMP_NUM_THREADS")
        if have is not None and have != self._omp_threads:
            return  # the user's
        want = str(max(int(spec.resources.get("CPU") or 1), 1))
        if have != want:
            os.environ["OMP_NUM_THREADS"] = want
        self._omp_threads = want

    def _reached_max_calls(self, spec: TaskSpec) -> bool:
        limit = (spec.actor_options or {}).get("max_calls") if spec.kind == 0 else None
        if not limit:
            return False
        n = self.calls_per_function.get(spec.function_id, 0) + 1
        self.calls_per_function[spec.function_id] = n
        return n >= limit

    def _actor_repr(self, spec: TaskSpec) -> str | None:
        if self.shared is not None:
            return self.shared.name_of(spec) or None
        return self.actor_name or None

    @property
    def actor_spec(self) -> TaskSpec | None:
        """The creation spec of the actor this code runs in (the running call's guest, in a
        host of shared-process actors)."""
        if self.shared is not None:
            return self.shared.spec_of(self.host.current.actor_id)
        return self._actor_spec

    def _task_error(self, spec: TaskSpec, e: BaseException) -> TaskError:
        ip = self.host.node.get("node_ip", "")
        return task_replies.task_error(spec, e, ip, self._actor_repr(spec))

    def _cancelled_reply(self, spec: TaskSpec, interrupt: BaseException) -> dict:
        """A cancel that interrupted the task's own code: as in Ray, the error is both a
        TaskCancelledError and a task error (``except RayTaskError`` catches it) with the
        traceback of where it was interrupted; never retried."""
        cancel = TaskCancelledError(spec.task_id.hex())
        cancel.__traceback__ = interrupt.__traceback__
        error = self._task_error(spec, cancel).as_instanceof_cause()
        return self.error_reply(spec, error, app=False)

    error_reply = staticmethod(task_replies.error_reply)

    # -- task events (the owner records the others; these only the executing worker sees) --
    def _record_running(self, spec: TaskSpec, log_at: tuple[int, int] | None = None) -> None:
        """RUNNING, from the worker, on every task's path: one append of a tuple whose extra
        is a dict shared by every task of that function here (its name, and where it runs:
        the same object each time, so a batch pickles it once and no task builds one). The
        name rides along because this event may reach the dashboard before the owner's.
        ``log_at``: where the worker's .out/.err end now, where this task's lines start (a
        running task's lines so far, a killed one's last lines); a new dict only when they
        moved since, i.e. after a task that printed (events queued keep their own dict)."""
        name = spec.name or spec.function_name
        extra = self._running_extra.get(name)
        if extra is None or extra.get("log_at") != log_at:
            extra = {
                "name": spec.display_name(),
                "worker_id": self.host.worker_id,
                "pid": os.getpid(),
                "node_id": self.host.node_id_hex,
            }
            if log_at is not None:
                extra["log_at"] = log_at
            if name in self._running_extra or len(self._running_extra) < 1024:
                self._running_extra[name] = extra  # bounded: names are few, but user-given
        self.host.task_events.record_start(
            (spec.task_id, "RUNNING", time.time(), spec.attempt, extra)
        )

    def _record_creation_end(self, spec: TaskSpec, reply: dict) -> None:
        """An actor's creation task ends here: its reply goes to the GCS, not to the owner,
        so this worker records how it ended."""
        failed = bool(reply.get("error"))
        extra: dict[str, Any] = {
            "job_id": spec.job_id,
            "name": spec.display_name(),
            "actor_id": spec.actor_id,
            "timings": reply.get("timings"),
            "pid": os.getpid(),
            "node_id": self.host.node_id_hex,
            "log": reply.get("log"),
        }
        if failed:
            extra["error"] = reply.get("message")
            extra["error_type"] = reply.get("error_type")
        self.host.record_event(spec, "FAILED" if failed else "FINISHED", **extra)

    def _load(self, spec: TaskSpec):
        if spec.kind == ACTOR_TASK:
            if self.shared is not None:
                return self.shared.method(spec)
            if self.actor is None:
                raise ActorDiedError(
                    spec.actor_id.hex() if spec.actor_id else "", "the actor is not constructed"
                )
            method = self._bound.get(spec.method_name) or self.bind_method(
                self.actor, spec.method_name, self._bound
            )
            if method is None:
                raise AttributeError(
                    f"actor {type(self.actor).__name__} has no method {spec.method_name!r}"
                )
            return method
        fn = self.functions.get(spec.function_id)
        if fn is None:
            self.adopt_code_path(spec.code_path)
            data = spec.function_bytes
            if data is None:
                data = self.host.run_sync(self._fetch_function(spec), 30.0)
            fn = self.functions[spec.function_id] = cloudpickle.loads(data)
        return fn

    @staticmethod
    def bind_method(instance: Any, name: str, cache: dict[str, Any]) -> Any:
        """The actor's method ``name`` (``method_lookup``); a plain method is bound once
        (kept in ``cache``)."""
        method = _BUILT_IN_METHODS.get(name)
        if method is not None:
            return method
        method, keep = actor_method(instance, name)
        if keep:
            cache[name] = method
        return method

    def adopt_code_path(self, code_path: list[str] | None) -> None:
        """The driver's import dirs go after ours, so its modules import here too. A dir that
        is a job's working_dir or py_modules package on the driver's node is this node's copy
        of it (copied from the head on first use)."""
        if not code_path:
            return
        if not self.host.code_path:
            self.host.code_path = list(code_path)  # passed on to the tasks this worker submits
        fetch = packages.fetch_through(self.host.call_gcs_sync)
        for p in code_path:
            if p in self._adopted:
                continue
            self._adopted.add(p)
            here = packages.localize(p, self.host.node["session_dir"], fetch)
            if here not in sys.path:
                sys.path.append(here)

    async def _fetch_function(self, spec: TaskSpec) -> bytes:
        conn = await self.host.connect_to_worker(spec.owner[0], spec.owner[1])
        data = await conn.call("get_function", {"function_id": spec.function_id})
        if data is None:
            raise RuntimeError(f"the owner no longer has the function {spec.function_name}")
        return data

    def resolve_args(self, spec: TaskSpec) -> tuple[list, dict]:
        return task_values.resolve_args(self.host, spec)

    def store_returns(self, spec: TaskSpec, result: Any) -> dict:
        return task_values.store_returns(self.host, spec, result)

    def _partial_reply(self, spec: TaskSpec, partial: generators.PartialReturns) -> dict:
        """A static generator's items, then its error in the returns it did not yield."""
        loc = error_location(self._task_error(spec, partial.error))
        return task_values.store_partial_returns(self.host, spec, partial.values, loc)

    # -- actors ----------------------------------------------------------------------------
    def _construct_actor(self, spec: TaskSpec, cls: Any, args: list, kwargs: dict) -> None:
        if self.shared is not None:
            self.shared.construct(spec, cls, args, kwargs)
            return
        self.adopt_code_path(spec.code_path)
        opts = spec.actor_options or {}
        self._actor_spec = spec
        self.host.current.actor_id = spec.actor_id
        self.host.actor_id = spec.actor_id
        self.actor_name = opts.get("class_name", getattr(cls, "__name__", "Actor"))
        self.host.raylet.send_threadsafe(
            "worker_title", {"worker_id": self.host.worker_id, "title": self.actor_name}
        )
        is_async = bool(opts.get("is_async"))
        # An async actor's default group runs on this loop; the constructor sees it as the
        # current loop (Ray: asyncio.get_event_loop() in __init__ is the default group's).
        default_loop = new_event_loop() if is_async else None
        if default_loop is not None:
            asyncio.set_event_loop(default_loop)
        self.actor = cls.__new__(cls)
        self.actor.__init__(*args, **kwargs)
        concurrency = opts.get("max_concurrency")
        groups = opts.get("concurrency_groups")
        if groups:
            self.groups = ConcurrencyGroups(groups, is_async)
        if default_loop is not None:
            self.lane = Lane("ember-async-actor", concurrency or 1000, default_loop)
        elif concurrency and concurrency > 1:
            self.pool = CallThreads(concurrency, "ember-actor")

    def _start_async_call(self, spec: TaskSpec, reply_to: Deferred, lane: Lane) -> None:
        """On ``lane``'s loop thread."""
        self.start_async_call(spec, lane.limit, lambda reply: self._async_replied(reply, reply_to))

    def _async_replied(self, reply: dict, reply_to: Deferred) -> None:
        reply_to.resolve_threadsafe(reply)
        if self.exiting:
            self._exit_actor(self.exit_reason)

    def start_async_call(self, spec: TaskSpec, limit: Any, after: Any) -> None:
        """On an async lane's loop thread: runs the call within ``limit`` (its actor's or
        group's semaphore) and hands its reply to ``after``."""
        call = asyncio.ensure_future(self._run_async(spec, limit, after))
        self.async_calls[spec.task_id] = (asyncio.get_running_loop(), call)
        call.add_done_callback(lambda _: self.async_calls.pop(spec.task_id, None))

    async def _run_async(self, spec: TaskSpec, limit: Any, after: Any) -> None:
        started = False
        try:
            async with limit:
                if spec.task_id in self.cancelled:
                    raise asyncio.CancelledError
                started = True
                reply = await self._execute_async(spec)
        except asyncio.CancelledError as e:  # cancelled while waiting for its turn, or in it
            if started:
                reply = self._cancelled_reply(spec, e)
            else:
                reply = self.error_reply(spec, TaskCancelledError(spec.task_id.hex()), app=False)
        after(reply)

    async def _execute_async(self, spec: TaskSpec) -> dict:
        timings = {"start": time.time()}
        # Calls of an async actor interleave: a call's range may hold its neighbours' lines.
        log_from = self.log_offsets.now() if self.log_offsets is not None else None
        self._record_running(spec, log_from)
        # This call's own task id and spec for get_runtime_context() and the tasks it
        # submits: calls running side by side on the loop each see their own.
        token = enter_async_call(
            {"task_id": spec.task_id, "spec": spec, "is_actor": True, "actor_id": spec.actor_id}
        )
        try:
            method = self._load(spec)
            if any(a[0] != ARG_INLINE for a in spec.args):
                args, kwargs = await asyncio.get_running_loop().run_in_executor(
                    None, self.resolve_args, spec
                )
            else:
                args, kwargs = self.resolve_args(spec)
            timings["args_ready"] = time.time()
            result = method(*args, **kwargs)
            if inspect.isawaitable(result):
                result = await result
            if spec.generator:
                result = await generators.run_async(self, spec, result)
            timings["executed"] = time.time()
            if isinstance(result, generators.PartialReturns):
                reply = self._partial_reply(spec, result)
            else:
                reply = self.store_returns(spec, result)
        except SystemExit as e:
            self._crash_unless_intended(spec, e)
            reply = self._exit_reply(spec, e)
        except asyncio.CancelledError:
            raise  # ember.cancel: _run_async answers TaskCancelledError
        except BaseException as e:  # noqa: BLE001
            if isinstance(e, TaskError) and getattr(e, "_from_arg", False):
                reply = self.error_reply(spec, e, app=False)
            else:
                reply = self.error_reply(spec, self._task_error(spec, e), app=True)
        finally:
            leave_async_call(token)
        task_replies.stamp(reply, timings, self.host, self.log_offsets, log_from)
        self.host.task_events.ended_here(spec.task_id)
        return reply

    def _restore_gpus(self) -> None:
        if self._gpus_at_start is None:
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = self._gpus_at_start
        self._gpus_set = False

    def _crash_unless_intended(self, spec: TaskSpec, e: SystemExit) -> None:
        """``sys.exit()`` with any code but 0 in a method (a bare ``sys.exit()``, 1, a
        message) is the actor's unexpected death in Ray 2.60, not an exit on purpose: the
        process ends with no reply to the call, so the actor restarts within max_restarts
        and the call is retried within max_task_retries, as after a crash. Its atexit
        handlers run first (Ray's do), and a message is printed as Python prints it."""
        if isinstance(e, ActorExit) or e.code == 0 or self.shared is not None:
            return  # a shared-process actor crashes alone (SharedActors.exit_reply)
        actor_exits.crash(spec.display_name(), e.code)

    def _exit_reply(self, spec: TaskSpec, e: SystemExit) -> dict:
        """The reply of the call that ends the actor on purpose; the actor exits after it."""
        if self.shared is not None:
            return self.shared.exit_reply(spec, e)
        self.exiting = True
        self.exit_reason = exit_cause(e, spec.display_name()) + " (an intentional exit)"
        return self.error_reply(
            spec, ActorDiedError(self.host.current_actor_hex(), self.exit_reason), app=False
        )

    def _exit_actor(self, reason: str) -> None:
        """Ends this actor's process after telling the GCS it meant to."""
        actor_exits.exit_on_purpose(self.host, reason)


def _terminate() -> None:
    raise ActorExit(0, "__ray_terminate__() was called")


# Methods every actor has (Ray's): ready once constructed; end after the calls before it.
_BUILT_IN_METHODS = {"__ray_ready__": lambda: True, "__ray_terminate__": _terminate}
