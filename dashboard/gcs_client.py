"""The dashboard's link to the GCS (framed transport, on the head node): actors, cluster
status and cluster events are polled; ``kill_actor`` is forwarded. Reconnects on loss."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import time
from typing import Any

from ember import config
from ember.dashboard.autoscaler.record import KV_KEY as AUTOSCALER_KEY
from ember.dashboard.autoscaler.record import KV_NAMESPACE as AUTOSCALER_NAMESPACE
from ember.dashboard.serve.recorded import record_poll
from ember.dashboard.serve.view import KV_KEY as SERVE_METRICS_KEY
from ember.dashboard.state import DashboardState
from ember.protocol import connection as conn_mod

logger = logging.getLogger(__name__)
POLL = 1.0


class GcsClient:
    def __init__(self, address: str, state: DashboardState, token: bytes | None = None) -> None:
        self.address = address
        self.state = state
        self.token = token
        self.conn: Any = None
        self.connected = False
        self._seen_events = 0
        self.interval = POLL
        # What was last recorded as history, so a poll that changed nothing writes nothing.
        self._last_jobs: Any = None
        self._last_info: Any = None
        self._lock = asyncio.Lock()  # one poll at a time: the loop's or a listing's
        self._poll_began = -1e9  # when the last finished poll began (monotonic)

    def resume_events(self, seen: int) -> None:
        """Skips the GCS's first ``seen`` cluster events (a restarted dashboard's history has
        them); a GCS whose list is shorter was restarted, and its events are read from the
        first."""
        self._seen_events = seen

    async def _ensure(self) -> Any:
        if self.conn is None or self.conn.closed:
            self.conn = await conn_mod.connect(self.address, name="gcs", token=self.token)
        self.connected = True
        return self.conn

    async def poll_loop(self) -> None:
        """Polls while the GCS answers. A GCS silent for longer than the reconnect timeout
        (``config.gcs_reconnect_timeout``; a restarted one is back within seconds) is gone
        with its head: the dashboard exits rather than report a dead cluster as alive."""
        last_ok = time.monotonic()
        while True:
            try:
                await self.poll_once()
                last_ok = time.monotonic()
            except Exception as e:
                if self.connected:
                    logger.warning("GCS poll failed: %s", e)
                self.connected = False
                silent = time.monotonic() - last_ok
                if silent > config.gcs_reconnect_timeout:
                    logger.error(
                        "the GCS at %s has not answered for %.0f s (reconnect timeout %g s): "
                        "the head is gone; the dashboard exits",
                        self.address,
                        silent,
                        config.gcs_reconnect_timeout,
                    )
                    os.kill(os.getpid(), signal.SIGTERM)
                    return
            await asyncio.sleep(self.interval)

    async def fresh(self) -> None:
        """What the GCS has (actors, placement groups, nodes) as of this call, as Ray's state
        API reads it: a poll now, unless one that began after the call has finished (calls
        that wait on one poll share the next). A GCS that does not answer leaves the state
        as it was (the listing answers from it)."""
        asked = time.monotonic()
        async with self._lock:
            if self._poll_began >= asked:
                return
            try:
                await self._poll_locked()
            except Exception as e:  # the loop reports the GCS's absence; a listing goes on
                logger.debug("fresh poll failed: %s", e)

    async def poll_once(self) -> None:
        async with self._lock:
            await self._poll_locked()

    async def _poll_locked(self) -> None:
        began = time.monotonic()
        await self._poll()
        self._poll_began = began

    async def _poll(self) -> None:
        conn = await self._ensure()
        actors = await conn.call("list_actors", None, timeout=10.0)
        # Listing every actor costs the GCS (which is on the actor-creation path) about 5 us
        # an actor: poll a big cluster less often, 1 s up to 5,000 actors, at most 10 s.
        self.interval = min(max(POLL, len(actors) / 5_000), 10.0)
        jobs = _hexify(await conn.call("list_jobs", None, timeout=10.0))
        info = _hexify(await conn.call("cluster_info", None, timeout=10.0))
        events = await conn.call("get_events", None, timeout=10.0)
        scaler = _autoscaler_record(
            await conn.call(
                "kv_get",
                {"namespace": AUTOSCALER_NAMESPACE, "key": AUTOSCALER_KEY},
                timeout=10.0,
            )
        )
        # Serve's request counters (a JSON record too; ServeMetrics.add drops anything else)
        serve = _autoscaler_record(
            await conn.call(
                "kv_get", {"namespace": "serve", "key": SERVE_METRICS_KEY}, timeout=10.0
            )
        )
        self.state.serve.add(serve)
        if self.state.recorder is not None:  # Serve's records, for --history

            async def kv_get(namespace: str, key: bytes) -> Any:
                return await conn.call("kv_get", {"namespace": namespace, "key": key}, timeout=10.0)

            await record_poll(self.state, kv_get, serve, time.time())
        if len(events) < self._seen_events:
            self._seen_events = 0  # the GCS trimmed its list
        new_events = events[self._seen_events :]
        self._seen_events = len(events)
        changed = apply_gcs_poll(
            self.state, [_actor_row(a) for a in actors], jobs, info, new_events, scaler
        )
        if self.state.recorder is not None:
            # Only what changed: the poll repeats every row each second.
            body: dict[str, Any] = {"actors": changed}
            if jobs != self._last_jobs:
                body["jobs"] = self._last_jobs = jobs
            if info != self._last_info:
                body["cluster"] = self._last_info = info
            if new_events:
                body["events"] = new_events
            if self.state.autoscaler.worth_recording(scaler, time.time()):
                body["autoscaler"] = scaler
            if len(body) > 1 or changed:
                self.state.record("gcs", body)

    async def put_kv(self, key: str, value: str) -> None:
        conn = await self._ensure()
        await conn.call(
            "kv_put",
            {
                "namespace": "dashboard",
                "key": key.encode(),
                "value": value.encode(),
                "overwrite": True,
            },
            timeout=10.0,
        )

    async def kv(self, op: str, namespace: str, key: bytes, value: bytes | None = None) -> Any:
        """One KV call (``kv_get``, ``kv_put``, ``kv_del``, ``kv_keys`` with ``key`` as the
        prefix) in ``namespace``: the job manager's records live there."""
        conn = await self._ensure()
        body: dict[str, Any] = {"namespace": namespace}
        if op == "kv_keys":
            body["prefix"] = key
        else:
            body["key"] = key
        if op == "kv_put":
            body.update(value=value or b"", overwrite=True)
        return await conn.call(op, body, timeout=10.0)

    async def get_named_actor(self, name: str, namespace: str) -> dict[str, Any] | None:
        """The named actor's record, None when there is none (Serve's routes ask for the
        Serve controller this way)."""
        conn = await self._ensure()
        return await conn.call(
            "get_named_actor", {"name": name, "namespace": namespace}, timeout=10.0
        )

    async def list_jobs(self) -> list[dict[str, Any]]:
        """The GCS's job table, asked on demand (the state API's ``jobs``), ids as hex."""
        conn = await self._ensure()
        return _hexify(await conn.call("list_jobs", None, timeout=10.0))

    async def list_nodes(self) -> list[dict[str, Any]]:
        """The GCS's node table, dead nodes (with their ``death_reason``) included."""
        conn = await self._ensure()
        return _hexify(await conn.call("list_nodes", None, timeout=10.0))

    async def kill_actor(
        self, actor_id: str, no_restart: bool = True, reason: str = "killed from the dashboard"
    ) -> None:
        """Raises NoSuchActor for an actor the GCS does not know. ``reason`` becomes the
        actor's death cause, so it should say who asked (the CLI, a script, the web page)."""
        conn = await self._ensure()
        await conn.call(
            "kill_actor",
            {
                "actor_id": bytes.fromhex(actor_id),
                "no_restart": no_restart,
                "reason": reason,
            },
            timeout=10.0,
        )


def _actor_row(a: dict[str, Any]) -> dict[str, Any]:
    row = _hexify(a)
    row["pending_reason"] = row.get("pending_reason") or None
    return row


def _hexify(v: Any) -> Any:
    if isinstance(v, bytes):
        return v.hex()
    if isinstance(v, dict):
        return {(k.hex() if isinstance(k, bytes) else k): _hexify(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_hexify(x) for x in v]
    return v


def apply_gcs_poll(
    st: Any,
    actors: list[dict[str, Any]],
    jobs: list[dict[str, Any]] | None,
    info: dict[str, Any] | None,
    events: list[dict[str, Any]],
    autoscaler: Any = None,
) -> list[dict[str, Any]]:
    """One poll of the GCS into the state (live, or replayed from the session's history);
    returns the actor rows that changed something. ``jobs`` or ``info`` None: unchanged;
    ``autoscaler``: the autoscaler's status record (None: none written, or not recorded)."""
    changed = []
    for row in actors:
        before = st.actors_version
        st.update_actor(row)
        if st.actors_version != before:
            changed.append(row)
    if jobs is not None:
        # Ended jobs end their tasks still open (their drivers will not report them).
        st.update_jobs(jobs)
    if info is not None:
        st.cluster = info
        st.reconcile_nodes(info.get("nodes") or [])
    for ev in events:
        st.add_event(
            ev.get("severity", "INFO"),
            ev.get("message", ""),
            source="gcs",
            kind="CLUSTER",
            t=ev.get("time"),
            job_id=_hexify(ev.get("job_id")) or None,
        )
    if autoscaler is not None:
        st.autoscaler.apply(st, autoscaler, st.clock())
    return changed


def _autoscaler_record(value: bytes | None) -> Any:
    """The KV value as the record's dict (what the history keeps), or as it came when it is
    not JSON (``AutoscalerView.apply`` then says what is wrong with it)."""
    if not value:
        return None
    try:
        return json.loads(value)
    except (ValueError, UnicodeDecodeError):
        return value
