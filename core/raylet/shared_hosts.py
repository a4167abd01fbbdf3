"""The raylet's host processes for ``shared_process`` actors, and each such actor's place in
one ("guest lease").

A host is an ordinary worker, leased from the lease machine like a dedicated actor's worker
(an actor lease of no resources, for a key that names no actor), so starting it, its death
and its kill are the machine's as for any worker. What the machine does not know is its
guests: this table keeps them, and the resources each guest holds come out of the node's
resources here, at the guest's grant, as a dedicated actor's do at its lease.

Hosts are kept per job and runtime_env (a process runs one job's code). The pool is sized
here: a job's actors are spread over as many hosts as the node has CPUs before any host
takes a second one (one process runs one thread of Python at a time, so actors that compute
in one host would share one core), then each new actor goes to the host with the fewest,
and a new host starts when every host has ``per_host``, so the pool grows with the actors
placed here. A host whose last guest ended is ended after
``idle_seconds``, unless a guest came back meanwhile. When a host dies, each of its guests is
reported to the GCS as a worker death of its own, so each restarts by its own rules.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
from typing import TYPE_CHECKING, Any

from ember import config
from ember.raylet import lease_events as ev
from ember.raylet.lease_records import HOST_KEY_PREFIX
from ember.resources import apply_strategy

if TYPE_CHECKING:
    from ember.raylet.lease_manager import LeaseManager

logger = logging.getLogger("ember.raylet")

# How often a placement waiting for resources looks again for room a task's lease gave back
# (a shared actor's own release wakes it at once).
ROOM_POLL_SECONDS = 0.2
# Guest lease ids come from their own range, so they never meet the machine's lease ids.
_GUEST_IDS_FROM = 1 << 48


class Host:
    """A host process: the pool's worker (its id, address, pid and connection) and the
    lease the machine holds for it."""

    __slots__ = ("lease_id", "job_id", "env", "guests", "worker")

    def __init__(self, lease_id: int, job_id: bytes | None, env: str, worker: Any) -> None:
        self.lease_id = lease_id
        self.job_id = job_id
        self.env = env
        self.guests: dict[int, GuestLease] = {}
        self.worker = worker

    @property
    def worker_id(self) -> bytes:
        return self.worker.worker_id

    @property
    def pid(self) -> int:
        return self.worker.pid


class GuestLease:
    __slots__ = ("lease_id", "actor_id", "host", "shape", "gpu_ids")

    def __init__(self, lease_id: int, actor_id: bytes, host: Host, shape: dict[str, float]):
        self.lease_id = lease_id
        self.actor_id = actor_id
        self.host = host
        self.shape = shape
        self.gpu_ids: list[int] = []


class SharedHosts:
    def __init__(
        self,
        manager: LeaseManager,
        per_host: int | None = None,
        idle_seconds: float | None = None,
        spread: int | None = None,
    ) -> None:
        self.manager = manager
        self.per_host = per_host or config.shared_actors_per_host
        # Hosts a job gets before actors share one: the node's CPUs (at least one).
        cpus = manager.machine.resources.total_dict().get("CPU", 1)
        self.spread = spread or max(1, int(cpus))
        self.idle_seconds = (
            config.shared_host_idle_seconds if idle_seconds is None else idle_seconds
        )
        self.hosts: dict[bytes, Host] = {}  # {worker_id: Host}
        self.guests: dict[int, GuestLease] = {}  # {guest lease id: GuestLease}
        self._ids = itertools.count(_GUEST_IDS_FROM)
        # {(job_id, env): the host starting for it}: concurrent placements wait for one start.
        self._starting: dict[tuple[Any, str], asyncio.Future] = {}
        self._room = asyncio.Event()  # set when a guest gives its resources back
        # {actor_id: its shape} while its placement waits for room: demand the node reports
        # in its heartbeats (``waiting_demands``), as the autoscaler sees queued leases.
        self._waiting: dict[bytes, dict[str, float]] = {}

    # -- the GCS's requests ------------------------------------------------------------------
    async def lease(self, body: dict) -> dict | None:
        """A place for one shared-process actor. While its resources are not free here the
        request waits, as a dedicated actor's does in the lease machine's queue (the GCS
        chose this node on its view, which may be a heartbeat old). None: this node takes
        no new actor (draining, stopping), or could never hold it; the GCS places it again."""
        machine = self.manager.machine
        shape = apply_strategy(body["resources"], body.get("strategy"))
        resources = machine.resources
        if shape and not resources.feasible(shape):
            return None
        actor_id = body["actor_id"]  # one placement at a time per actor (the GCS's)
        try:
            while True:
                if machine.draining or machine.stopping:
                    return None
                if not shape or resources.can_fit(shape):
                    host = await self._host_for(body.get("job_id"), body.get("env", ""))
                    if host is None:
                        return None
                    if not shape or resources.can_fit(shape):
                        break
                if actor_id not in self._waiting:
                    self._waiting[actor_id] = shape
                    self.manager.demand_changed()
                # A guest's place given back wakes it; room a task's lease gave back, the poll.
                self._room.clear()
                try:
                    await asyncio.wait_for(self._room.wait(), ROOM_POLL_SECONDS)
                except TimeoutError:
                    pass
        finally:
            self._waiting.pop(actor_id, None)
        guest = GuestLease(next(self._ids), actor_id, host, shape)
        if shape:
            guest.gpu_ids = resources.acquire(shape)
        host.guests[guest.lease_id] = guest
        self.guests[guest.lease_id] = guest
        return {
            "lease_id": guest.lease_id,
            "worker_id": host.worker_id,
            "address": host.worker.address,
            "pid": host.pid,
            "gpu_ids": [],
            "node_id": self.manager.machine.node_id,
        }

    def waiting_demands(self) -> list[dict[str, float]]:
        """The shapes of the placements waiting here for room, one per placement."""
        return list(self._waiting.values())

    def owns(self, lease_id: Any) -> bool:
        return lease_id in self.guests

    def release(self, lease_id: int, drop: bool, reason: str = "its lease was returned") -> None:
        """The GCS is done with a guest's place (it died, or restarts elsewhere). ``drop``:
        the host still holds the actor and must let it go (a lease this GCS never knew)."""
        guest = self.guests.pop(lease_id, None)
        if guest is None:
            return
        host = guest.host
        host.guests.pop(lease_id, None)
        if guest.shape:
            self._give_back([guest])
        conn = getattr(host.worker, "conn", None)
        if drop and conn is not None and not conn.closed:
            conn.send("exit", {"actor_id": guest.actor_id, "force": True, "reason": reason})
        if not host.guests:
            self._end_if_still_idle(host)

    def leases(self) -> list[tuple[int, bytes, bytes]]:
        """(guest lease id, host worker id, actor id) of every guest placed here."""
        return [(g.lease_id, g.host.worker_id, g.actor_id) for g in self.guests.values()]

    def public(self) -> list[dict[str, Any]]:
        return [
            {
                "worker_id": h.worker_id.hex(),
                "pid": h.pid,
                "job_id": h.job_id.hex() if h.job_id else None,
                "actors": len(h.guests),
            }
            for h in self.hosts.values()
        ]

    # -- the lease machine's news -----------------------------------------------------------
    def host_died(self, worker: Any) -> bool:
        """A worker died: if it was a host, each of its guests is reported dead on its own
        (their resources are free again). False if it hosted none."""
        host = self.hosts.pop(worker.worker_id, None)
        if host is None:
            return False
        reason = worker.exit_reason or "its process died"
        reason = f"the shared process hosting it (pid {host.pid}) died: {reason}"
        gcs = self.manager.raylet.gcs
        for guest in host.guests.values():
            self.guests.pop(guest.lease_id, None)
            if gcs is not None and not gcs.closed:
                gcs.send(
                    "worker_died",
                    {"worker_id": host.worker_id, "actor_id": guest.actor_id, "reason": reason},
                )
        self._give_back([g for g in host.guests.values() if g.shape])
        host.guests.clear()
        return True

    def _give_back(self, guests: list[GuestLease]) -> None:
        """The guests' resources back to the node; the lease machine's queue and the
        placements waiting here look again."""
        if not guests:
            return
        for guest in guests:
            self.manager.machine.resources.release(guest.shape, guest.gpu_ids)
        self.manager.handle(ev.ResourcesChanged())
        self._room.set()

    # -- hosts -------------------------------------------------------------------------------
    async def _host_for(self, job_id: bytes | None, env: str) -> Host | None:
        while True:
            mine = [h for h in self.hosts.values() if h.job_id == job_id and h.env == env]
            roomy = [h for h in mine if len(h.guests) < self.per_host]
            emptiest = min(roomy, key=lambda h: len(h.guests)) if roomy else None
            if emptiest is not None and (not emptiest.guests or len(mine) >= self.spread):
                return emptiest
            key = (job_id, env)
            starting = self._starting.get(key)
            if starting is None:
                starting = asyncio.ensure_future(self._start_host(job_id, env))
                self._starting[key] = starting
                starting.add_done_callback(lambda _f, k=key: self._starting.pop(k, None))
            if await asyncio.shield(starting) is None:
                return emptiest  # no new host: an existing one with room will do
            # Look again: the placements that waited with this one take turns, each to the
            # emptiest host then (the new one first), or start the next.

    async def _start_host(self, job_id: bytes | None, env: str) -> Host | None:
        key = HOST_KEY_PREFIX + os.urandom(5)
        body = {"resources": {}, "job_id": job_id, "env": env, "class_name": "shared actors"}
        try:
            grant = await self.manager.request_actor_worker(body, key)
        except Exception as e:
            logger.warning("could not start a host for shared-process actors: %s", e)
            return None
        if not grant or "worker_id" not in grant:
            return None
        worker = self.manager.pool.workers.get(grant["worker_id"])
        if worker is None or worker.dead:
            return None
        host = Host(grant["lease_id"], job_id, env, worker)
        self.hosts[host.worker_id] = host
        worker.title = "shared actors host (0 actors)"
        return host

    def _end_if_still_idle(self, host: Host) -> None:
        def end() -> None:
            if host.guests or self.hosts.get(host.worker_id) is not host:
                return
            del self.hosts[host.worker_id]
            self.manager.handle(ev.LeaseEnded(host.lease_id, "its last shared actor ended"))

        asyncio.get_running_loop().call_later(self.idle_seconds, end)
