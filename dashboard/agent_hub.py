"""The dashboard's side of the agent streams: a gRPC server that ingests what every agent
sends into ``DashboardState`` and routes requests (stacks, logs, objects) to one agent.

An agent that disconnects mid-stream leaves its node marked DEAD with the reason, its data
still served; requests to it fail at once with ``AgentUnavailable`` naming the node.
"""

from __future__ import annotations

import asyncio
import hmac
import itertools
import logging
import os
import time
from typing import Any

import grpc
from ember import config
from ember.agent import wire
from ember.dashboard.app import AgentUnavailable
from ember.dashboard.node_logs import NodeLogs, shipped_logs
from ember.dashboard.state import DashboardState
from ember.listen_rules import rule_for
from ember.process_util import trim_heap

logger = logging.getLogger(__name__)
# Requests waiting to go to one agent; past this the caller is told the agent is busy.
MAX_PENDING_REQUESTS = 256
TRIM_EVERY_BYTES = 32 * 2**20  # received from the agents between two heap trims
# No bandwidth-delay probing on the agents' streams: with it gRPC grows each connection's
# receive window to megabytes, and during a burst (100 agents sending a million tasks' events
# faster than the loop ingests them) those windows fill with undelivered messages, measured
# with benchmarks/dashboard_scale.py: ingest peak 370-500 MB with, 210-250 MB in most runs
# without, at the same ingestion rate (some runs still peak at 390-490 MB, held in the gRPC
# threads' malloc arenas for another reason, not found yet). The default 64 KB windows keep
# a 2 s metrics tick and a 5,000-event batch far from waiting on the network.
#
# Strangers (ember.protocol.preauth's deadline, applied by gRPC itself): a connection that has
# not finished HTTP/2's opening within the deadline is closed, and so is one that holds no
# call for as long (an agent opens its stream as soon as it connects; a stream without the
# token is refused at once). Headers before the token are bounded by gRPC's metadata limit
# (8 KiB by default). gRPC owns the accept loop, so the hub has no per-IP cap.
_DEADLINE_MS = int(config.auth_deadline_seconds * 1000)
SERVER_OPTIONS = [
    *wire.CHANNEL_OPTIONS,
    ("grpc.http2.bdp_probe", 0),
    ("grpc.server_handshake_timeout_ms", _DEADLINE_MS),
    ("grpc.max_connection_idle_ms", _DEADLINE_MS),
]


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host else host  # an IPv6 address needs its brackets


class AgentLink:
    """One connected agent: its outgoing request queue and the replies it owes."""

    def __init__(self, node_id: str) -> None:
        self.node_id = node_id
        self.outbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue(MAX_PENDING_REQUESTS)
        self.waiting: dict[int, asyncio.Future] = {}  # {rid: future of the reply}
        self.connected_at = time.time()

    def fail_all(self, reason: str) -> None:
        for fut in self.waiting.values():
            if not fut.done():
                fut.set_exception(AgentUnavailable(reason))
        self.waiting.clear()


class AgentHub:
    def __init__(self, state: DashboardState, token: str | None = None) -> None:
        self.state = state
        self.token = token
        self.links: dict[str, AgentLink] = {}  # {node_id: link}
        self._rids = itertools.count(1)
        self.server: grpc.aio.Server | None = None
        self.address = ""
        self._received_since_trim = 0  # bytes of agent messages since the last heap trim
        self.node_logs: NodeLogs | None = None  # where other nodes' logs are kept (server.py)

    # -- server ----------------------------------------------------------------------------
    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        handler = grpc.method_handlers_generic_handler(
            wire.SERVICE,
            {
                "Connect": grpc.stream_stream_rpc_method_handler(
                    self._connect, request_deserializer=None, response_serializer=None
                )
            },
        )
        self.server = grpc.aio.server(options=SERVER_OPTIONS)
        self.server.add_generic_rpc_handlers((handler,))
        if host.startswith("unix:"):  # an embedded node's agent, on this machine (mode 0700 dir)
            path = host[len("unix:") :]
            if os.path.exists(path):
                os.unlink(path)  # a previous dashboard's, in this session
            self.server.add_insecure_port(host)
            self.address = host
        else:
            where = _bracketed(host)
            bound = self.server.add_insecure_port(f"{where}:{port}")
            twin = rule_for(host, cluster=True).twin
            if twin is not None:  # like every node listener: loopback too, same port and token
                try:
                    self.server.add_insecure_port(f"{_bracketed(twin)}:{bound}")
                except RuntimeError as e:  # agents stream to the node IP: not fatal
                    logger.warning("the agents' hub is not on %s:%d too: %s", twin, bound, e)
            self.address = f"{where}:{bound}"
        await self.server.start()
        return self.address

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop(grace=0.5)
        for link in self.links.values():
            link.fail_all("the dashboard is stopping")

    def connected_nodes(self) -> list[str]:
        return list(self.links)

    # -- one agent's stream ----------------------------------------------------------------
    def open_link(self, node_id: str, info: dict[str, Any]) -> AgentLink:
        """An agent said hello (over gRPC, or in this process: the head's own agent)."""
        old = self.links.get(node_id)
        if old is not None:
            old.fail_all(f"the agent of node {node_id[:12]} reconnected")
        link = self.links[node_id] = AgentLink(node_id)
        agent_connected(self.state, node_id, info)
        self.state.record("hello", {"node": node_id, "info": info})
        return link

    def close_link(self, link: AgentLink) -> None:
        """The agent's stream ended (unless it reconnected since): the node may be alive
        without it (an agent is restarted), so its death is the GCS's to say
        (``DashboardState.agent_gone``)."""
        if self.links.get(link.node_id) is link:
            del self.links[link.node_id]
            link.fail_all(f"the agent of node {link.node_id[:12]} disconnected")
            self.state.agent_gone(link.node_id)
            self.state.record("gone", {"node": link.node_id})

    async def _connect(self, request_iterator: Any, context: grpc.aio.ServicerContext) -> Any:
        if self.token is not None:
            given = dict(context.invocation_metadata() or ()).get(wire.TOKEN_KEY, "")
            if not hmac.compare_digest(str(given).encode(), self.token.encode()):
                await context.abort(
                    grpc.StatusCode.UNAUTHENTICATED,
                    "the dashboard needs the cluster token (pass --token-file to the agent)",
                )
        link: AgentLink | None = None
        reader: asyncio.Task | None = None
        try:
            first = wire.decode(await _next(request_iterator))
            if first.get("type") != "hello" or not first.get("node_id"):
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "first message: hello")
            link = self.open_link(str(first["node_id"]), first.get("info") or {})
            reader = asyncio.ensure_future(self._read(link, request_iterator))
            while True:
                get = asyncio.ensure_future(link.outbox.get())
                done, _ = await asyncio.wait({get, reader}, return_when=asyncio.FIRST_COMPLETED)
                if get in done:
                    yield wire.encode(get.result())
                else:
                    get.cancel()
                    reader.result()  # re-raise what ended the reader
                    return
        except (asyncio.CancelledError, StopAsyncIteration):
            pass
        except Exception as e:
            logger.warning("agent stream ended: %s", e)
        finally:
            if reader is not None and not reader.done():
                reader.cancel()
            if link is not None:
                self.close_link(link)

    async def _read(self, link: AgentLink, request_iterator: Any) -> None:
        async for raw in request_iterator:
            # Decoded batches are freed once ingested, but glibc keeps the pages: during a
            # burst (a million tasks' events) that is ~100 MB of resident memory the state
            # does not use, so give it back by volume, not only on the 5 s timer.
            self._received_since_trim += len(raw)
            if self._received_since_trim > TRIM_EVERY_BYTES:
                self._received_since_trim = 0
                trim_heap()
            try:
                msg = wire.decode(raw)
                self.ingest(link, msg)
            except Exception as e:  # one bad message must not end the stream
                logger.warning("bad message from the agent of %s: %s", link.node_id[:12], e)

    def ingest(self, link: AgentLink, msg: dict[str, Any]) -> None:
        kind = msg["type"]
        if kind in RECORDED:
            apply_agent_message(self.state, link.node_id, msg)
            self.state.record("agent", {"node": link.node_id, "msg": msg})
        elif kind == "log_chunk":  # another node's log, kept on the head (node_logs.py)
            if self.node_logs is not None:
                self.node_logs.chunk(link.node_id, msg)
        elif kind == "reply":
            fut = link.waiting.pop(int(msg["rid"]), None)
            if fut is not None and not fut.done():
                if msg.get("error"):
                    fut.set_exception(AgentUnavailable(str(msg["error"])))
                else:
                    fut.set_result(msg.get("body"))
        else:
            raise ValueError(f"unknown message type {kind!r}")

    # -- requests to an agent --------------------------------------------------------------
    async def call(self, node_id: str, op: str, body: dict[str, Any], timeout: float) -> Any:
        link = self.links.get(node_id)
        if link is None and op in LOG_OPS and self.node_logs is not None:
            # A node that is gone (or whose agent is away): the copy of its logs on the head.
            shipped = shipped_logs(self.node_logs.session_dir, node_id)
            if shipped is not None:
                return await shipped.serve(op, body)
        if link is None:
            node = self.state.nodes.get(node_id)
            why = f" ({node.lost_reason})" if node and node.lost_reason else ""
            raise AgentUnavailable(f"the agent of node {node_id[:12]} is not connected{why}")
        rid = next(self._rids)
        fut = asyncio.get_running_loop().create_future()
        link.waiting[rid] = fut
        try:
            link.outbox.put_nowait({"type": "request", "rid": rid, "op": op, "body": body})
        except asyncio.QueueFull:
            link.waiting.pop(rid, None)
            raise AgentUnavailable(
                f"the agent of node {node_id[:12]} has {MAX_PENDING_REQUESTS} requests queued; "
                "try again"
            ) from None
        try:
            return await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            raise AgentUnavailable(
                f"the agent of node {node_id[:12]} did not answer {op!r} within {timeout:g} s"
            ) from None
        finally:
            link.waiting.pop(rid, None)


async def _next(iterator: Any) -> bytes:
    async for item in iterator:
        return item
    raise StopAsyncIteration


# The agents' messages that change the state (and so are kept as the session's history).
RECORDED = ("metrics", "task_events", "actors", "event")
LOG_OPS = ("log_tail", "log_read", "log_search")


def apply_agent_message(st: DashboardState, node_id: str, msg: dict[str, Any]) -> None:
    """One agent message into the state: from the agent's stream, or replayed from the
    session's history (``history_reader``)."""
    kind = msg["type"]
    if kind == "metrics":
        if msg.get("info"):
            st.update_node(node_id, msg["info"])
        if "workers" in msg:
            st.set_workers(node_id, msg["workers"])
        if "logs" in msg:
            st.set_log_index(node_id, msg["logs"])
        st.node_metrics(node_id, float(msg.get("time") or st.clock()), msg["sample"])
        for transfer in msg.get("transfers") or ():
            st.timeline.add_transfer(transfer)  # object copies between nodes
    elif kind == "task_events":
        st.add_task_events(
            node_id,
            str(msg.get("job_id") or ""),
            msg["events"],
            int(msg.get("dropped") or 0),
            int(msg.get("folded") or 0),
        )
    elif kind == "actors":
        for row in msg["actors"]:
            st.update_actor(row)
    elif kind == "event":
        st.add_event(
            str(msg.get("severity", "ERROR")),
            str(msg.get("message", "")),
            source=str(msg.get("source", "agent")),
            node_id=node_id,
            pid=msg.get("pid"),
            kind=str(msg.get("kind", "")),
            detail=msg.get("detail"),
            t=msg.get("time"),
        )


def agent_connected(st: DashboardState, node_id: str, info: dict[str, Any]) -> None:
    st.update_node(node_id, info)
    st.add_event(
        "INFO",
        f"agent of node {node_id[:12]} connected",
        source="dashboard",
        node_id=node_id,
        kind="AGENT_CONNECTED",
    )
