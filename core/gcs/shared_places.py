"""The GCS's side of shared-process actors: what differs from a dedicated actor when the
actor is one of many in a host process (``raylet/shared_hosts.py``, ``core_worker/
shared_actors.py``).

- its place is a guest lease in a host (``lease_shared_actor``), and the GCS's connection to
  the host serves all its guests;
- a kill drops the actor from its host (``drop_actor``) rather than killing a process; only
  a host that does not answer within ``DROP_TIMEOUT`` (wedged: a call holding the GIL, a
  stopped process) is killed, and then each of its actors fails by its own rules;
- its place is given back as each incarnation ends (``EndLease``), since no process exit
  tells the raylet.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from ember.gcs.actor_machine import (
    ActorInfo,
    ActorState,
    EndLease,
    ExitWorker,
    KillWorker,
    WorkerDied,
)
from ember.protocol.connection import Connection

if TYPE_CHECKING:
    from ember.gcs.actors import ActorManager

logger = logging.getLogger(__name__)

DROP_TIMEOUT = 5.0  # seconds a host has to let a killed actor go before it is killed


class SharedPlaces:
    def __init__(self, manager: ActorManager) -> None:
        self.manager = manager

    async def connection(self, grant: dict) -> Connection:
        """The GCS's connection to the host (one for all its actors)."""
        m = self.manager
        worker_id = grant["worker_id"]
        conn = m.worker_conns.get(worker_id)
        if conn is not None and not conn.closed:
            return conn
        conn = await m.connect(
            grant["address"],
            {},
            name=f"host:{worker_id.hex()[:8]}",
            on_close=lambda c, w=worker_id: self._closed(w, c),
        )
        m.worker_conns[worker_id] = conn
        return conn

    def _address_of(self, worker_id: bytes) -> str | None:
        """A host's address, from any live actor it holds (the killed one's is cleared)."""
        for other in self.manager.actors.values():
            if other.shared and other.worker_id == worker_id and other.address:
                return other.address
        return None

    def _closed(self, worker_id: bytes, conn: Connection) -> None:
        if self.manager.worker_conns.get(worker_id) is conn:
            del self.manager.worker_conns[worker_id]

    def exit(self, actor: ActorInfo, ins: ExitWorker) -> None:
        """A graceful end (its handles are gone, its constructor raised): the host ends it
        after its queued calls and reports ``actor_exited``. A forced one is the kill's."""
        if ins.force:
            return
        conn = self.manager.worker_conns.get(actor.worker_id) if actor.worker_id else None
        if conn is not None and not conn.closed:
            conn.send("exit", {"actor_id": actor.actor_id, "reason": ins.reason})

    def kill(self, actor: ActorInfo, ins: KillWorker) -> None:
        if actor.worker_id is not None and actor.node_id is not None:
            asyncio.ensure_future(self._drop(actor, actor.node_id, actor.worker_id, ins.reason))

    async def _drop(self, actor: ActorInfo, node_id: bytes, worker_id: bytes, reason: str) -> None:
        m = self.manager
        conn = m.worker_conns.get(worker_id)
        try:
            if conn is None or conn.closed:
                # This GCS process has not spoken to the host yet (it started after it).
                address = self._address_of(worker_id)
                if not address:
                    raise ConnectionError("no connection to its host, and no address")
                conn = await self.connection({"worker_id": worker_id, "address": address})
            await conn.call(
                "drop_actor", {"actor_id": actor.actor_id, "reason": reason}, timeout=DROP_TIMEOUT
            )
        except Exception as e:
            node = m.nodes.get_alive(node_id)
            if node is not None:
                logger.warning(
                    "the host %s of shared-process actor %s did not drop it (%s): killing "
                    "the host; its other actors fail and restart by their own rules",
                    worker_id.hex()[:12],
                    actor.actor_id.hex(),
                    e,
                )
                why = f"{reason}; its shared process did not let it go within {DROP_TIMEOUT} s"
                node.conn.send("kill_worker", {"worker_id": worker_id, "reason": why, "grace": 0})
            return  # the raylet reports the host's death for each of its actors
        # Gone from its host, as a dedicated actor is gone with its process: a kill that
        # restarts it places it again now; a dead actor's record ignores this.
        state = actor.state
        if actor.worker_id == worker_id and state in (
            ActorState.ALIVE,
            ActorState.PENDING_CREATION,
        ):
            event = WorkerDied(reason, m.jobs.running(actor.job_id))
            m.carry_out(actor, m.machine.handle(actor, event))

    def end_lease(self, actor: ActorInfo, ins: EndLease) -> None:
        node = self.manager.nodes.get_alive(actor.node_id) if actor.node_id else None
        if node is not None:
            node.conn.send("return_actor_lease", {"lease_id": ins.lease_id, "kill": False})

    def end_cut_off(self, actor: ActorInfo, node: Any) -> None:
        """A GCS restart cut its creation off: its place is dropped (the host stays)."""
        if actor.lease_id is not None:
            node.conn.send("return_actor_lease", {"lease_id": actor.lease_id, "kill": True})
        actor.lease_id = None
