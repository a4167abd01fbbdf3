"""The raylet's worker leases as a state machine with no I/O.

A lease is a worker plus the resources it holds while it runs tasks, one at a time, for the
process that asked for it (or, for an actor lease, for the GCS). ``LeaseMachine.handle``
takes an event (a worker registered, a lease was asked for or returned, a worker died…) and
returns the instructions its I/O shell (``lease_manager.LeaseManager``) must carry out:
start workers, answer a request with a grant, a spillback or an error, kill or retire a
worker, ask the GCS for a fresh view. Nothing here touches a socket, a process or a timer,
so tests drive it with plain objects.

Every worker moves through ``WORKER_LIFECYCLE``; an event its state does not allow raises
``TransitionError`` with the moves that led there.

Lease requests wait in arrival order. One that no node can ever satisfy stays pending and its
holder is told once, naming the task and the shapes (as Ray does).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from ember.raylet.cluster_view import ClusterView
from ember.raylet.lease_events import (
    ActorWorkerDied,
    AskLeasesBack,
    AskMayExit,
    BacklogReported,
    Cancel,
    CheckAnswered,
    ClientGone,
    Grant,
    GroupRemoved,
    JobFinished,
    KillRequested,
    KillWorker,
    LeaseEnded,
    LeaseRequested,
    LeaseReturned,
    NodeDeclaredDead,
    RefreshView,
    RequestWithdrawn,
    ResourcesChanged,
    RetireWorker,
    ShuttingDown,
    Spillback,
    StartFailed,
    StartWorkers,
    Tick,
    Unschedulable,
    ViewChanged,
    ViewRefreshed,
    WarnInfeasible,
    WorkerBlocked,
    WorkerNotStarted,
    WorkerRegistered,
    WorkersExited,
    WorkerStarted,
    WorkerUnblocked,
)
from ember.raylet.lease_records import JOB_WORKERS, Lease, Request, ViewCheck, W, Worker
from ember.resources import (
    NodeResources,
    fits,
    fmt,
    fmt_request,
    group_request,
    of_resource,
    to_fixed,
)
from ember.scheduling import NodeView, lease_decision


class LeaseMachine:
    """Workers, the lease queue and the node's resources; ``handle`` is the only way in."""

    def __init__(
        self,
        node_id: bytes,
        resources: NodeResources,
        view: ClusterView,
        *,
        clock: Callable[[], float],
        can_refresh_view: Callable[[], bool] = lambda: False,
        max_starting: int = 1_000_000,
    ) -> None:
        self.node_id = node_id
        self.resources = resources
        self.view = view
        self.clock = clock
        self.can_refresh_view = can_refresh_view  # is the GCS there to ask for a view?
        self.in_cluster = False  # other nodes' views lag a heartbeat: warn later
        # Draining (the GCS's drain_node): no new task lease here; queued ones go elsewhere.
        self.draining = False
        self.queue: list[Request] = []
        # {(client, its class key): (shape, tasks waiting beyond its requests)}
        self.backlogs: dict[tuple[Any, int], tuple[dict[str, float], int]] = {}
        # Task leases granted since a waiting request last asked holders for theirs back.
        self._not_asked_back: dict[int, Lease] = {}
        self.leases: dict[int, Lease] = {}
        self.idle: list[Worker] = []
        self.starting = 0  # workers in STARTING, and those StartWorkers asked for
        self.max_starting = max_starting
        self.spread_index = 0
        self.stopping = False
        self._next_lease_id = 1
        # When the last lease ended (on ``clock``): the autoscaler's idle timer starts there,
        # not at the heartbeat and tick that first showed it the node idle.
        self._last_lease_end = clock()

    def handle(self, event: Any) -> list[Any]:
        out: list[Any] = []
        _ON[type(event)](self, event, out)
        return out

    # -- workers ----------------------------------------------------------------------------
    def _on_started(self, ev: WorkerStarted, out: list) -> None:
        self.starting += 1

    def _on_not_started(self, ev: WorkerNotStarted, out: list) -> None:
        self.starting -= 1  # no dispatch: it would only ask for the same start again

    def _on_registered(self, ev: WorkerRegistered, out: list) -> None:
        w = ev.worker
        if w.track.state is W.STARTING:
            self.starting -= 1
            w.track.fire("registered")
            self.idle.append(w)
            self._dispatch(out)
        else:
            w.track.fire("registered")  # killed while starting: it stays on its way out

    def _on_exited(self, ev: WorkersExited, out: list) -> None:
        for w in ev.workers:
            track = w.track
            if track.state is W.STARTING:
                self.starting -= 1
                track.fire("start_failed")
                out.append(StartFailed(w))
            else:
                if track.state is W.IDLE:
                    self.idle.remove(w)
                track.fire("died")
            lease = self.leases.pop(w.lease_id, None) if w.lease_id else None
            if lease is not None:
                self._release(lease)
                self._last_lease_end = self.clock()
            if w.actor_id is not None:
                out.append(ActorWorkerDied(w))
        self._dispatch(out)

    def _exiting(self, w: Worker) -> None:
        """Moves a live worker to EXITING, out of the idle list or the starting count."""
        state = w.track.state
        if state is W.STARTING:
            self.starting -= 1
        elif state is W.IDLE:
            self.idle.remove(w)
        w.track.fire("kill")

    def _on_kill(self, ev: KillRequested, out: list) -> None:
        if ev.worker.track.state is W.DEAD:
            return
        self._exiting(ev.worker)
        out.append(KillWorker(ev.worker, ev.reason, ev.grace))

    def _on_blocked(self, ev: WorkerBlocked, out: list) -> None:
        w = ev.worker
        lease = self.leases.get(w.lease_id) if w.lease_id is not None else None
        cpus = _cpus_of(lease.shape) if lease is not None else None
        if lease is None or lease.released or not cpus:
            return
        lease.released = True
        w.blocked = True
        self.resources.release(cpus)
        self._dispatch(out)

    def _on_unblocked(self, ev: WorkerUnblocked, out: list) -> None:
        w = ev.worker
        lease = self.leases.get(w.lease_id) if w.lease_id is not None else None
        if lease is None or not lease.released:
            return
        lease.released = False
        w.blocked = False
        # Take the CPU back even if that oversubscribes for a moment (as Ray does).
        self.resources.acquire(_cpus_of(lease.shape))

    def _on_tick(self, ev: Tick, out: list) -> None:
        now = self.clock()
        res = self.resources
        for req in self.queue:
            if not req.warned and now - req.since > ev.warn_after and not res.feasible(req.shape):
                self._maybe_warn_infeasible(req, out)
        # Idle workers beyond the CPU count (left from blocked-get bursts) exit after a while,
        # unless they still own objects someone uses: those would be lost with them.
        keep = max(int(res.total_dict().get("CPU", 1)), 1)
        idle = self.idle
        if len(idle) <= keep:
            return
        for w in idle[: len(idle) - keep]:
            if now - w.idle_since > ev.idle_after:
                idle.remove(w)
                w.track.fire("idle_timeout")
                out.append(AskMayExit(w))

    def _on_check_answered(self, ev: CheckAnswered, out: list) -> None:
        w = ev.worker
        if w.track.state is not W.CHECKING:
            return  # it died meanwhile
        if ev.may_exit:
            w.track.fire("may_exit")
            out.append(RetireWorker(w))
        else:
            w.track.fire("must_stay")
            w.idle_since = self.clock()
            self.idle.append(w)
            self._dispatch(out)

    # -- leases -----------------------------------------------------------------------------
    def _on_requested(self, ev: LeaseRequested, out: list) -> None:
        req = ev.request
        req.since = self.clock()
        # Deeper requests first, in arrival order within a depth: a task blocked on its
        # children frees its CPU for them, and serving the children before the parent's
        # siblings keeps the tree depth-first, so the blocked tasks (each one holding a
        # worker process) stay about depth x CPUs rather than the tree's whole width.
        queue = self.queue
        i = len(queue)
        while i and queue[i - 1].depth < req.depth:
            i -= 1
        queue.insert(i, req)
        self._dispatch(out)

    def _on_returned(self, ev: LeaseReturned, out: list) -> None:
        lease = self.leases.get(ev.lease_id)
        if lease is not None:
            self._end(lease, False, ev.reason, 0.0, out)

    def _on_ended(self, ev: LeaseEnded, out: list) -> None:
        lease = self.leases.get(ev.lease_id)
        if lease is not None:
            self._end(lease, True, ev.reason, ev.grace, out)

    def _on_client_gone(self, ev: ClientGone, out: list) -> None:
        client = ev.client
        for key in [k for k in self.backlogs if k[0] is client]:
            del self.backlogs[key]
        for req in [r for r in self.queue if r.client is client]:
            self.queue.remove(req)
            out.append(Cancel(req))
        for lease in list(self.leases.values()):
            if lease.client is client and not lease.is_actor:
                self._end(lease, True, "the process that leased it died", 0.0, out)
        self._dispatch(out)

    def _on_backlog(self, ev: BacklogReported, out: list) -> None:
        if ev.backlog > 0:
            self.backlogs[(ev.client, ev.class_id)] = (ev.shape, ev.backlog)
        else:
            self.backlogs.pop((ev.client, ev.class_id), None)

    def _on_withdrawn(self, ev: RequestWithdrawn, out: list) -> None:
        for req in self.queue:
            if req.client is ev.client and req.request_id == ev.request_id:
                self.queue.remove(req)
                out.append(Cancel(req))
                self._dispatch(out)  # what waited behind it may fit now
                return

    def _on_job_finished(self, ev: JobFinished, out: list) -> None:
        for lease in list(self.leases.values()):
            if lease.worker.job_id == ev.job_id and not lease.is_actor:
                self._end(lease, True, "its job finished", 0.0, out)
        # Its idle workers serve no other job: they go too (as Ray ends a job's workers).
        mark = JOB_WORKERS + ev.job_id.hex()
        for w in [w for w in self.idle if w.env.endswith(mark)]:
            self._exiting(w)
            out.append(KillWorker(w, "its job finished", 0.0))

    def _on_group_removed(self, ev: GroupRemoved, out: list) -> None:
        markers = ev.markers
        why = "its placement group was removed"
        if markers is not None:
            why = "its placement group bundle was released"
        for lease in list(self.leases.values()):
            if markers is None:
                hit = any(ev.pg_hex in k for k in lease.shape)
            else:
                hit = not markers.isdisjoint(lease.shape)
            if hit:
                self._end(lease, True, why, 0.0, out)

    def _on_resources_changed(self, ev: Any, out: list) -> None:
        self._dispatch(out)

    def _on_view_changed(self, ev: ViewChanged, out: list) -> None:
        if self.queue:
            self._dispatch(out)

    def _on_view_refreshed(self, ev: ViewRefreshed, out: list) -> None:
        for req in self.queue:
            if req.view_check is ViewCheck.PENDING:
                req.view_check = ViewCheck.DONE
        self._dispatch(out)

    def _on_node_dead(self, ev: NodeDeclaredDead, out: list) -> None:
        reason = "the node was declared dead"
        for lease in list(self.leases.values()):
            self._end(lease, True, reason, 0.0, out, dispatch=False)
        for w in list(self.idle):
            self._exiting(w)
            out.append(KillWorker(w, reason))
        self.node_id = ev.new_node_id

    def _on_shutting_down(self, ev: ShuttingDown, out: list) -> None:
        self.stopping = True

    def _release(self, lease: Lease) -> None:
        if lease.released:  # its CPU was already handed back while it was blocked
            lent = _cpus_of(lease.shape)
            shape = {k: v for k, v in lease.shape.items() if k not in lent}
        else:
            shape = lease.shape
        self.resources.release(shape, lease.gpu_ids)

    def _end(
        self,
        lease: Lease,
        kill: bool,
        reason: str,
        grace: float,
        out: list,
        dispatch: bool = True,
    ) -> None:
        self.leases.pop(lease.lease_id, None)
        self._not_asked_back.pop(lease.lease_id, None)
        self._last_lease_end = self.clock()
        self._release(lease)
        w = lease.worker
        w.lease_id = None
        w.blocked = False
        state = w.track.state
        if kill or lease.is_actor:  # an actor's worker is never reused
            if state is not W.DEAD:
                self._exiting(w)
                out.append(KillWorker(w, reason or "its lease ended", grace))
        elif state is W.LEASED:
            w.track.fire("returned")
            w.title = ""
            w.tasks_run += 1
            w.idle_since = self.clock()
            self.idle.append(w)
        if dispatch:
            self._dispatch(out)

    # -- granting ---------------------------------------------------------------------------
    def _dispatch(self, out: list) -> None:
        """Grants what fits, in order; starts workers for grants that wait only for one."""
        if self.stopping:
            return
        res = self.resources
        queue = self.queue
        idle = self.idle
        need_workers = 0
        # What grants waiting only for a worker would take: a worker is started for a
        # request only if it would still fit after those before it.
        promised: dict[str, int] = {}
        # Whose requests would fit once leases come back (an actor lease's: None, the GCS).
        waiting_clients: set[Any] = set()
        i = 0
        while i < len(queue):
            req = queue[i]
            if req.actor_id is None:  # actor leases come from the GCS, already placed
                placed = self._place_here(req, out)
                if placed is False:  # answered: spilled elsewhere or failed
                    queue.pop(i)
                    continue
                if placed is None:  # held until a fresh cluster view arrives
                    i += 1
                    continue
            if not res.can_fit(req.shape):
                if (
                    req.actor_id is not None
                    and self.in_cluster
                    and group_request(req.shape) is None
                    and not self._waits_for_room(req)
                ):
                    # The GCS placed this actor on a view a heartbeat old (a placement
                    # group's bundle may have taken the room since): answered "not now",
                    # so the GCS places it again, elsewhere or here once room comes. Held
                    # here instead, it waited for good while other nodes had room. An
                    # actor in a bundle waits here: its bundle is on no other node, and
                    # its pending reason is this node's (who holds the bundle's CPU).
                    queue.pop(i)
                    out.append(Cancel(req))
                    continue
                if res.feasible(req.shape):
                    waiting_clients.add(req.client)
                elif not self.in_cluster:
                    # In a cluster the view of other nodes lags a heartbeat: the tick warns.
                    self._maybe_warn_infeasible(req, out)
                i += 1
                continue
            w = _idle_for(idle, req.env)
            if w is None:
                if _fits_beside(res, req.shape, promised):
                    need_workers += 1
                    for k, v in req.shape.items():
                        promised[k] = promised.get(k, 0) + to_fixed(v)
                    if need_workers >= self.max_starting and not self.view.nodes and not idle:
                        # Alone, with no idle worker and every start slot wanted, nothing
                        # further down can change this pass: stop (each registration once
                        # rescanned thousands of queued actor leases). The tick still warns
                        # of infeasible ones; in a cluster every request is looked at, as
                        # any may spill.
                        break
                i += 1
                continue
            queue.pop(i)
            lease_id = self._next_lease_id
            self._next_lease_id = lease_id + 1
            is_actor = req.actor_id is not None
            gpus = res.acquire(req.shape)
            lease = Lease(
                lease_id, w, req.shape, gpus, req.client, is_actor, req.retriable, self.clock()
            )
            self.leases[lease_id] = lease
            w.lease_id = lease_id
            w.depth = req.depth
            w.job_id = req.job_id
            w.title = req.name
            if is_actor:
                w.track.fire("actor")
                w.actor_id = req.actor_id
            else:
                w.track.fire("leased")
                self._not_asked_back[lease_id] = lease
            out.append(Grant(req, lease))
        if self.draining and self._not_asked_back:
            # Owners push tasks straight to the workers they lease: a draining node asks
            # for every lease back, so no new task starts here through a cached lease.
            out.append(AskLeasesBack(list(self._not_asked_back.values()), draining=True))
            self._not_asked_back.clear()
        elif waiting_clients and self._not_asked_back:
            self._ask_leases_back(waiting_clients, out)
        # At most max_starting at once: a burst waits here, not in the fork server's pipe.
        to_start = min(need_workers, self.max_starting) - self.starting
        if to_start > 0:
            self.starting += to_start
            out.append(StartWorkers(to_start))

    def _waits_for_room(self, req: Request) -> bool:
        """An actor lease the GCS sent with no node's room in its view waits here, asking
        this node's task leases back (``waiting_clients``), for as long as no other node has
        room for it; answered "not now" it would be parked until a heartbeat showed room,
        which a driver submitting task after task onto its lease never lets one show."""
        if not req.wait_for_room or not self.resources.feasible(req.shape):
            return False
        return not any(fits(req.shape, n["available"]) for n in self.view.nodes)

    def _ask_leases_back(self, waiting_clients: set[Any], out: list) -> None:
        """Asks for the task leases a waiting request of another client could use. A client
        whose own requests wait gets its next task onto its own leases anyway, so its leases
        are not asked for on its own behalf (a batch of tasks would lose its workers between
        tasks)."""
        asked = [
            lease
            for lease in self._not_asked_back.values()
            if len(waiting_clients) > 1 or lease.client not in waiting_clients
        ]
        if asked:
            for lease in asked:
                del self._not_asked_back[lease.lease_id]
            out.append(AskLeasesBack(asked))

    def _place_here(self, req: Request, out: list) -> bool | None:
        """Whether a task's lease request waits here (True); else answers it with the node to
        ask instead (spillback) or an error (False), or holds it for a fresh view (None)."""
        res = self.resources
        draining = self.draining
        # A draining node offers nothing: a request goes to a node that can take it, or is
        # held here (as demand the autoscaler sees) until one can.
        here = (
            NodeView(self.node_id, {}, {})
            if draining
            else NodeView(self.node_id, res.total_dict(), res.available_dict())
        )
        others = [NodeView(n["node_id"], n["total"], n["available"]) for n in self.view.nodes]
        kind, target = lease_decision(
            here,
            others,
            req.shape,
            req.strategy,
            spilled=0 if draining else req.spilled,
            spread=self.spread_index,
            waited=self.clock() - req.since,
        )
        if req.strategy == "SPREAD":
            self.spread_index += 1
        if kind == "local" or kind == "infeasible":
            return None if draining else True
        if kind == "fail" and draining:
            return None
        if kind == "fail":
            if req.view_check is ViewCheck.PENDING:
                return None  # the fresh view is on its way
            if req.view_check is ViewCheck.NOT_ASKED and self.can_refresh_view():
                # The node may have joined since the last heartbeat: ask before failing.
                req.view_check = ViewCheck.PENDING
                out.append(RefreshView())
                return None
            out.append(Unschedulable(req, target))
            return False
        node = self.view.by_id[target.node_id]
        # Count it as taken until the next view, so one pass does not send everything to the
        # same node (as Ray does with its cluster resource view).
        available = node["available"]
        for k, v in req.shape.items():
            if k in available:
                available[k] -= v
        out.append(Spillback(req, target.node_id, node["tcp_address"]))
        return False

    def _maybe_warn_infeasible(self, req: Request, out: list) -> None:
        if req.warned:
            return
        if any(fits(req.shape, n.get("total", {})) for n in self.view.nodes):
            return  # another node can run it
        req.warned = True
        what = f"actor {req.name}" if req.actor_id else f"task {req.name or '(unnamed)'}"
        message = (
            f"The {what} requires {fmt_request(req.shape)}, which no node in the cluster has "
            f"(this node has {fmt(_own(self.resources.total_dict()))}). It stays pending until a node "
            f"that can run it joins; to run it here, lower its resource requests."
        )
        out.append(WarnInfeasible(req, message))

    # -- views ------------------------------------------------------------------------------
    def idle_for(self) -> float | None:
        """Seconds since the last lease ended, with no lease held and none waiting; None
        while the node has work."""
        if self.leases or self.queue or self.backlogs:
            return None
        return max(0.0, self.clock() - self._last_lease_end)

    def pending_demands(self, waiting: Iterable[dict[str, float]] = ()) -> list[dict[str, Any]]:
        """The queue by shape, for the GCS's autoscaling view (heartbeats); ``waiting``:
        more requests waiting elsewhere on the node (shared-process actors' placements)."""
        demands: dict[tuple, dict] = {}

        def add(shape: dict[str, float], count: int) -> None:
            key = tuple(sorted(shape.items()))
            d = demands.setdefault(
                key,
                {"shape": shape, "count": 0, "infeasible": not self.resources.feasible(shape)},
            )
            d["count"] += count

        for r in self.queue:
            add(r.shape, 1)
        # Tasks their owners hold back beyond their requests (a few per class) wait too.
        for shape, backlog in self.backlogs.values():
            add(shape, backlog)
        for shape in waiting:
            add(shape, 1)
        return list(demands.values())


def _cpus_of(shape: dict[str, float]) -> dict[str, float]:
    """The CPUs a lease holds, which it lends out while its task waits in ``get``: the node's
    or, in a placement group, the bundle's, so a task captured into its parent's group runs
    in the CPU the blocked parent lent (Ray's rule too)."""
    return of_resource(shape, "CPU")


def _idle_for(idle: list[Worker], env: str) -> Worker | None:
    """Takes an idle worker that may run work of runtime_env ``env`` out of ``idle``: one
    kept for it, else (for an env) a worker of the common pool that never ran anything,
    which is then kept for it. None when there is none: a worker is started."""
    if idle and idle[-1].env == env:
        return idle.pop()  # the common case: no runtime_env, the last worker back
    for i in range(len(idle) - 1, -1, -1):
        if idle[i].env == env:
            return idle.pop(i)
    if env:
        for i in range(len(idle) - 1, -1, -1):
            w = idle[i]
            if not w.env and not w.tasks_run:
                w.env = env
                return idle.pop(i)
    return None


def _own(total: dict[str, float]) -> dict[str, float]:
    """A node's resources without its placement groups' renamed copies (CPU_group_0_<id>)."""
    return {k: v for k, v in total.items() if group_request({k: v}) is None}


def _fits_beside(res: NodeResources, shape: dict[str, float], promised: dict[str, int]) -> bool:
    """Whether ``shape`` fits in what is available once ``promised`` (fixed point) is taken."""
    avail = res.available
    for name, amount in shape.items():
        if amount > 0 and avail.get(name, 0) - promised.get(name, 0) < to_fixed(amount):
            return False
    return True


_ON: dict[type, Callable[[LeaseMachine, Any, list], None]] = {
    WorkerStarted: LeaseMachine._on_started,
    WorkerNotStarted: LeaseMachine._on_not_started,
    WorkerRegistered: LeaseMachine._on_registered,
    WorkersExited: LeaseMachine._on_exited,
    LeaseRequested: LeaseMachine._on_requested,
    LeaseReturned: LeaseMachine._on_returned,
    LeaseEnded: LeaseMachine._on_ended,
    WorkerBlocked: LeaseMachine._on_blocked,
    WorkerUnblocked: LeaseMachine._on_unblocked,
    KillRequested: LeaseMachine._on_kill,
    ClientGone: LeaseMachine._on_client_gone,
    RequestWithdrawn: LeaseMachine._on_withdrawn,
    BacklogReported: LeaseMachine._on_backlog,
    JobFinished: LeaseMachine._on_job_finished,
    GroupRemoved: LeaseMachine._on_group_removed,
    ResourcesChanged: LeaseMachine._on_resources_changed,
    ViewChanged: LeaseMachine._on_view_changed,
    ViewRefreshed: LeaseMachine._on_view_refreshed,
    Tick: LeaseMachine._on_tick,
    CheckAnswered: LeaseMachine._on_check_answered,
    NodeDeclaredDead: LeaseMachine._on_node_dead,
    ShuttingDown: LeaseMachine._on_shutting_down,
}
