"""The lease machine's I/O shell: turns lease messages and process exits into events for
``LeaseMachine`` and carries out what it answers (replies, worker starts and kills, questions
to workers and the GCS).

Messages it serves: ``request_lease`` / ``return_lease`` (core workers), ``lease_actor_worker``
/ ``return_actor_lease`` / ``kill_worker`` (the GCS), ``worker_blocked`` /
``worker_unblocked`` / ``worker_title`` / ``worker_exit_reason`` (core workers).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import signal
import time
from typing import TYPE_CHECKING, Any

from ember import config
from ember.exceptions import TaskUnschedulableError
from ember.protocol.connection import Connection
from ember.raylet import lease_events as ev
from ember.raylet import lease_machine as lm
from ember.raylet.lease_records import Request, is_host_key
from ember.raylet.shared_hosts import SharedHosts
from ember.raylet.start_admission import StartAdmission
from ember.raylet.start_failures import StartFailures
from ember.raylet.worker_pool import WorkerProc
from ember.resources import apply_strategy

if TYPE_CHECKING:
    from ember.raylet.raylet import Raylet

logger = logging.getLogger("ember.raylet")


class LeaseManager:
    def __init__(self, raylet: Raylet) -> None:
        self.raylet = raylet
        self.pool = raylet.pool
        self.machine = lm.LeaseMachine(
            raylet.node_id,
            raylet.resources,
            raylet.view,
            clock=time.monotonic,
            can_refresh_view=self._gcs_up,
            max_starting=config.max_starting_workers or max(8, 2 * (os.cpu_count() or 1)),
        )
        # Why recent workers ended ({worker_id: reason}), for holders whose task's worker
        # died: the newest config.worker_exit_reasons_kept, older ones counted as forgotten.
        self.exit_reasons: collections.OrderedDict[bytes, str] = collections.OrderedDict()
        # The latest workers' exits, for the node's agent: (pid, reason, intended), intended
        # when asked for (an actor killed or told to exit, an idle worker retired, a lease
        # ended) or a clean exit; the agent reports the others as crashes.
        self.recent_exits: collections.deque[tuple[int, str, bool]] = collections.deque(maxlen=256)
        self.start_failures = StartFailures(
            os.path.join(raylet.pool.node["session_dir"], "logs"), time.monotonic
        )
        self.exit_reasons_forgotten = 0
        # {worker_id: loop time}: workers retiring after max_calls that stay to serve what
        # they own (h_worker_draining), not killed for lingering before then.
        self._draining: dict[bytes, float] = {}
        self.admission = StartAdmission(raylet.memory.reader, raylet.memory.threshold)
        self.shared = SharedHosts(self)  # the hosts of shared_process actors
        self._do = {
            ev.StartWorkers: self._start_workers,
            ev.Grant: self._grant,
            ev.Spillback: self._spillback,
            ev.Unschedulable: self._unschedulable,
            ev.Cancel: self._cancel,
            ev.WarnInfeasible: self._warn_infeasible,
            ev.RefreshView: self._refresh_view,
            ev.KillWorker: self._kill_worker,
            ev.RetireWorker: self._retire_worker,
            ev.AskMayExit: self._ask_may_exit,
            ev.ActorWorkerDied: self._actor_worker_died,
            ev.StartFailed: self._start_failed,
            ev.AskLeasesBack: self._ask_leases_back,
        }

    def handle(self, event: Any) -> None:
        """Feeds one event to the machine and carries out its instructions, in order."""
        do = self._do
        machine = self.machine
        for ins in machine.handle(event):
            do[type(ins)](ins)
        membership = self.raylet.membership
        if (machine.queue or machine.backlogs) and not membership.demand_reported:
            membership.beat_soon()

    def pending_demands(self) -> list[dict[str, Any]]:
        """What waits on this node for resources, by shape (the heartbeat's report): the
        lease queue, owners' backlogs and shared-process actors' placements."""
        return self.machine.pending_demands(self.shared.waiting_demands())

    def demand_changed(self) -> None:
        """New demand outside the lease machine: reported at the next early beat."""
        if not self.raylet.membership.demand_reported:
            self.raylet.membership.beat_soon()

    def _gcs_up(self) -> bool:
        gcs = self.raylet.gcs
        return gcs is not None and not gcs.closed

    # -- workers ----------------------------------------------------------------------------
    def start_worker(self) -> WorkerProc:
        """Starts a worker before anyone asks for one (prestart)."""
        w = self.pool.start_worker()
        self.handle(ev.WorkerStarted(w))
        return w

    def worker_registered(self, w: WorkerProc, conn: Connection, body: dict) -> None:
        w.pid = body.get("pid", w.pid)
        w.conn = conn
        w.address = body["address"]
        w.log_paths = body.get("log_paths")
        if w.log_paths:
            self.raylet.logs.add_worker(w)
        self.handle(ev.WorkerRegistered(w))

    def client_gone(self, conn: Connection) -> None:
        """A lease holder died: its workers may be running its tasks; stop them."""
        self.handle(ev.ClientGone(conn))

    def reap(self) -> None:
        """Accounts for every worker process that exited since the last look."""
        dead = self.pool.reap()
        for w in dead:
            self.pool.forget(w)
            self.exit_reasons[w.worker_id] = w.exit_reason
            # Killed here (the GCS's kill_worker sets the reason even when the worker then
            # exits within the grace), or a clean exit: asked for, not a crash.
            intended = bool(w.kill_reason) or w.exit_code == 0
            self.recent_exits.append((w.pid, w.exit_reason, intended))
            while len(self.exit_reasons) > config.worker_exit_reasons_kept:
                self.exit_reasons.popitem(last=False)
                self.exit_reasons_forgotten += 1
            self.raylet.logs.worker_exited(w)
        self.handle(ev.WorkersExited(dead))

    async def reaper(self) -> None:
        while True:
            await asyncio.sleep(0.2)
            try:
                self.reap()
                patience = config.infeasible_warning_seconds
                if self.machine.in_cluster:
                    patience += 2 * config.heartbeat_interval
                self.handle(ev.Tick(config.idle_worker_kill_seconds, patience))
                self.start_failures.flush()
            except Exception:
                # A bug (a TransitionError names the worker and its moves) must not stop
                # the node from ever reaping again.
                logger.exception("the reaper's pass failed")

    # -- messages ---------------------------------------------------------------------------
    def h_request_lease(self, conn: Connection, body: dict) -> asyncio.Future:
        # A worker of ours asking runs a task at some depth; its children are one deeper. A
        # driver's (or another node's) tasks are depth 1.
        holder = self.pool.workers.get(body.get("client", b""))
        depth = holder.depth + 1 if holder is not None and holder.lease_id else 1
        return self._request(
            body, conn, body.get("name", ""), spilled=int(body.get("spilled") or 0), depth=depth
        )

    def h_lease_actor_worker(self, conn: Connection, body: dict) -> asyncio.Future:
        # The GCS holds an actor's lease for its life: no client connection ends it.
        fut = self._request(
            body,
            None,
            body.get("class_name", ""),
            actor_id=body["actor_id"],
            wait_for_room=bool(body.get("wait_for_room", False)),
        )
        fut.add_done_callback(lambda f: self._actor_lease_answered(conn, f))
        return fut

    async def h_lease_shared_actor(self, conn: Connection, body: dict) -> dict | None:
        grant = await self.shared.lease(body)
        if grant is not None and conn.closed:
            # The GCS process that asked died while the request waited here (as for a
            # dedicated actor's lease, _actor_lease_answered): nobody will use this place.
            self.shared.release(grant["lease_id"], drop=False)
            return None
        return grant

    def request_actor_worker(self, body: dict, key: bytes) -> asyncio.Future:
        """An actor lease for ``key`` (a shared-process actors' host): the grant, or None."""
        return self._request(body, None, body.get("class_name", ""), actor_id=key)

    def _actor_lease_answered(self, conn: Connection, fut: asyncio.Future) -> None:
        if fut.cancelled() or fut.exception() is not None or fut.result() is None:
            return
        if conn.closed:
            # The GCS process that asked died while the request waited here: the reply goes
            # nowhere, and the new GCS places the actor again. Nobody would ever use or
            # return this lease; its worker would stay until the node stops. (A grant
            # answered just before that GCS died is in this node's next registration.)
            lease_id = fut.result()["lease_id"]
            logger.info("actor lease %d ended: the GCS that asked for it is gone", lease_id)
            self.handle(ev.LeaseEnded(lease_id, "the GCS that asked for it is gone"))

    def actor_leases(self) -> list[tuple[int, bytes, bytes]]:
        """(lease id, worker id, actor id) of every actor lease held here: what a new GCS
        checks against its actor table when this node registers again (a lease whose grant
        died with the old GCS is one it does not know)."""
        dedicated = [
            (lease.lease_id, lease.worker.worker_id, lease.worker.actor_id)
            for lease in self.machine.leases.values()
            if lease.is_actor
            and lease.worker.actor_id is not None
            and not is_host_key(lease.worker.actor_id)
        ]
        return dedicated + self.shared.leases()

    def _request(self, body: dict, client: Any, name: str, **kw: Any) -> asyncio.Future:
        """A lease request to the machine; the future is its answer."""
        fut = asyncio.get_running_loop().create_future()
        strategy = body.get("strategy")
        shape = apply_strategy(body["resources"], strategy)
        req = Request(
            fut,
            shape,
            strategy,
            client,
            body.get("job_id"),
            name,
            retriable=bool(body.get("retriable", False)),
            env=body.get("env", ""),
            request_id=body.get("request_id"),
            **kw,
        )
        self.handle(ev.LeaseRequested(req))
        return fut

    def h_report_backlog(self, conn: Connection, body: dict) -> None:
        shape = apply_strategy(body["resources"], body.get("strategy"))
        self.handle(ev.BacklogReported(conn, body["class_id"], shape, int(body["backlog"])))

    def h_cancel_lease_request(self, conn: Connection, body: dict) -> None:
        self.handle(ev.RequestWithdrawn(conn, body["request_id"]))

    def h_return_lease(self, conn: Connection, body: dict) -> None:
        lease_id = body["lease_id"]
        if lease_id not in self.machine.leases:
            return
        # A holder that saw the worker die (or retire after max_calls) must not get it back.
        if body.get("worker_died", False):
            # Usually the worker is already gone: learn how (exit code, signal) rather than
            # blaming our own kill, and kill it only if it is still there a moment later.
            self.reap()  # ends the lease if its worker has exited
            self.handle(ev.LeaseEnded(lease_id, "its holder lost it", config.worker_death_grace))
            return
        self.handle(ev.LeaseReturned(lease_id))

    def h_return_actor_lease(self, conn: Connection, body: dict) -> None:
        lease_id = body["lease_id"]
        if self.shared.owns(lease_id):  # a shared-process actor's place in its host
            self.shared.release(lease_id, drop=body.get("kill", True))
            return
        if body.get("kill", True):
            self.handle(ev.LeaseEnded(lease_id, "actor lease returned"))
        else:
            # An actor's worker is killed all the same.
            self.handle(ev.LeaseReturned(lease_id, "actor lease returned"))

    def h_worker_blocked(self, conn: Connection, body: dict) -> None:
        w = self.pool.workers.get(body["worker_id"])
        if w is not None:
            self.handle(ev.WorkerBlocked(w))

    def h_worker_unblocked(self, conn: Connection, body: dict) -> None:
        w = self.pool.workers.get(body["worker_id"])
        if w is not None:
            self.handle(ev.WorkerUnblocked(w))

    def h_worker_title(self, conn: Connection, body: dict) -> None:
        w = self.pool.workers.get(body["worker_id"])
        if w is not None:
            w.title = body["title"]

    def h_kill_worker(self, conn: Connection, body: dict) -> None:
        """Kills a worker now, or after ``grace`` seconds if it has not exited by then."""
        w = self.pool.workers.get(body["worker_id"])
        if w is None or w.dead:
            return
        reason = body.get("reason", "killed")
        grace = body.get("grace", 0)
        if grace:
            w.kill_reason = reason  # if it exits on its own meanwhile, this is still why
        self.handle(ev.KillRequested(w, reason, grace))

    async def h_worker_exit_reason(self, conn: Connection, body: dict) -> str | None:
        """How a worker ended (exit code or signal), waiting up to
        config.worker_death_grace + 1 s for its exit to be seen; None if still unknown."""
        wid = body["worker_id"]
        deadline = time.monotonic() + config.worker_death_grace + 1.0
        while True:
            self.reap()
            reason = self.exit_reasons.get(wid)
            if reason is not None:
                return reason
            if wid not in self.pool.workers:
                if self.exit_reasons_forgotten:
                    return (
                        f"unknown: the raylet keeps the last {config.worker_exit_reasons_kept} "
                        f"worker exits and has forgotten {self.exit_reasons_forgotten}"
                    )
                return None
            if time.monotonic() > deadline:
                return None
            await asyncio.sleep(0.02)

    def pending_leases(self) -> list[dict[str, Any]]:
        feasible = self.machine.resources.feasible
        return [
            {
                "shape": r.shape,
                "name": r.name,
                "since": r.since,
                "infeasible": not feasible(r.shape),
            }
            for r in self.machine.queue
        ]

    # -- instructions -----------------------------------------------------------------------
    def _start_workers(self, ins: ev.StartWorkers) -> None:
        workers = len(self.pool.workers)
        self.admission.check_open_files(workers + ins.count)
        why = self.admission.tasks_allow(ins.count)
        if why is None and self.raylet.memory.enabled:
            why = self.admission.memory_allows(workers)
        if why is not None:
            # Held back, not failed: the reaper's pass asks again (start_admission.py).
            if why:
                logger.error(why)
                self._tell_drivers(why, "memory")
            for _ in range(ins.count):
                self.handle(ev.WorkerNotStarted())
            return
        for _ in range(ins.count):
            try:
                self.pool.start_worker()
            except Exception:
                # Tried again on the next pass over the queue (the reaper's, at the latest).
                logger.exception("could not start a worker")
                self.handle(ev.WorkerNotStarted())

    def _grant(self, ins: ev.Grant) -> None:
        lease = ins.lease
        w: Any = lease.worker
        fut = ins.request.reply
        if not fut.done():
            fut.set_result(
                {
                    "lease_id": lease.lease_id,
                    "worker_id": w.worker_id,
                    "address": w.address,
                    "gpu_ids": lease.gpu_ids,
                    "pid": w.pid,
                    "node_id": self.machine.node_id,
                }
            )

    def _spillback(self, ins: ev.Spillback) -> None:
        fut = ins.request.reply
        if not fut.done():
            fut.set_result({"spillback": {"node_id": ins.node_id, "address": ins.address}})
        # The request now waits on the other node, which reports it: the GCS should not
        # hear it from here too until the next beat (the autoscaler and `ember status` would
        # count it twice, as when a new node takes a burst's first request).
        if self.raylet.membership.demand_reported:
            self.raylet.membership.beat_soon()

    def _unschedulable(self, ins: ev.Unschedulable) -> None:
        fut = ins.request.reply
        if not fut.done():
            fut.set_exception(TaskUnschedulableError(ins.message))

    def _cancel(self, ins: ev.Cancel) -> None:
        fut = ins.request.reply
        if not fut.done():
            fut.set_result(None)

    def _warn_infeasible(self, ins: ev.WarnInfeasible) -> None:
        logger.warning(ins.message)
        client = ins.request.client
        self._tell_drivers(ins.message, "infeasible", [client] if client is not None else None)

    def _tell_drivers(self, message: str, kind: str, targets: list[Any] | None = None) -> None:
        """A warning printed by drivers (``targets``: those connections; None: every driver
        of this node)."""
        for c in targets if targets is not None else list(self.raylet.drivers.values()):
            if c is not None and not c.closed:
                c.send("warning", {"message": message, "kind": kind})

    def _ask_leases_back(self, ins: ev.AskLeasesBack) -> None:
        by_client: dict[Any, list[int]] = {}
        for lease in ins.leases:
            by_client.setdefault(lease.client, []).append(lease.lease_id)
        for client, lease_ids in by_client.items():
            if client is not None and not client.closed:
                body: dict[str, Any] = {"lease_ids": lease_ids}
                if ins.draining:
                    body["draining"] = True
                client.send("leases_wanted", body)

    def _refresh_view(self, ins: ev.RefreshView) -> None:
        asyncio.ensure_future(self.raylet.membership.refresh_view())

    def _kill_worker(self, ins: ev.KillWorker) -> None:
        w: Any = ins.worker
        if ins.grace:
            self._kill_later(w, ins.reason, ins.grace)
        elif not w.dead:
            self.pool.kill(w, ins.reason)

    def _kill_later(self, w: WorkerProc, reason: str, grace: float) -> None:
        """Kills ``w`` after ``grace`` seconds unless it has exited by then; a draining
        worker (``h_worker_draining``) at the end of its drain instead."""
        loop = asyncio.get_running_loop()

        def kill_if_alive() -> None:
            if w.dead or w.proc.poll() is not None:
                self._draining.pop(w.worker_id, None)
                return
            drained_by = self._draining.get(w.worker_id)
            if drained_by is not None and loop.time() < drained_by:
                loop.call_at(drained_by, kill_if_alive)
                return
            self._draining.pop(w.worker_id, None)
            self.pool.kill(w, reason)

        loop.call_later(grace, kill_if_alive)

    def h_worker_draining(self, conn: Connection, body: dict) -> None:
        w = self.pool.workers.get(body["worker_id"])
        if w is not None:
            loop = asyncio.get_running_loop()
            self._draining[w.worker_id] = loop.time() + config.worker_drain_seconds + 5.0

    def _retire_worker(self, ins: ev.RetireWorker) -> None:
        self.pool.kill(ins.worker, "idle", signal.SIGTERM)  # type: ignore[arg-type]

    def _ask_may_exit(self, ins: ev.AskMayExit) -> None:
        asyncio.ensure_future(self._may_exit(ins.worker))  # type: ignore[arg-type]

    async def _may_exit(self, w: WorkerProc) -> None:
        try:
            may_exit = await w.conn.call("may_exit", None, timeout=5.0)
        except Exception:
            may_exit = False
        self.handle(ev.CheckAnswered(w, bool(may_exit)))

    def _actor_worker_died(self, ins: ev.ActorWorkerDied) -> None:
        w: Any = ins.worker
        if self.shared.host_died(w) or is_host_key(w.actor_id):
            return  # a host: each of its actors was reported on its own
        gcs = self.raylet.gcs
        if gcs is not None and not gcs.closed:
            gcs.send(
                "worker_died",
                {"worker_id": w.worker_id, "actor_id": w.actor_id, "reason": w.exit_reason},
            )

    def _start_failed(self, ins: ev.StartFailed) -> None:
        self.start_failures.record(ins.worker)
