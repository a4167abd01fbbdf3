"""Messages a node's dashboard agent handles on its Unix socket (``ember.agent.agent``).

The agent's own link to the dashboard is a gRPC stream of JSON documents (see
``ember.agent.wire``), not this wire.
"""

from __future__ import annotations

from typing import Any

from ember.protocol.messages.base import OMIT, Catalogue, Message

AGENT = Catalogue("agent", "ember.agent.agent.Agent")


class AgentMessage(Message):
    catalogue = AGENT


class TaskEvents(AgentMessage):
    """A batch of task state changes from a core worker's bounded buffer."""

    op = "task_events"
    sent_by = "core worker (event exporter)"
    oneway = True

    events: list[tuple[bytes, str, float, int, Any]]  # (task_id, state, time, attempt, extra)
    job_id: bytes | None = OMIT
    worker_id: bytes | None = OMIT
    dropped: int = OMIT  # events the buffer lost before this batch


class TaskEventsSync(AgentMessage):
    """Sent by an exiting core worker after its last batch: the reply says the agent has
    every batch sent before it (the stream is ordered), so the process may exit without
    losing the events still in its socket's buffer."""

    op = "task_events_sync"
    sent_by = "core worker (event exporter), at shutdown"
    reply = "null, once every batch sent before it is in the agent's queue"


class ErrorEvent(AgentMessage):
    """A cluster event for the dashboard (a crashed task's traceback); the body's keys are
    passed on as the event's."""

    op = "error_event"
    sent_by = "core worker"
    oneway = True
    body_is = "event"

    event: dict[str, Any]  # severity, message, kind, pid, detail
