"""The raylet's heartbeat loop (``raylet/membership.py``) with a fake GCS: an unexpected
error in one beat is logged and the next beat goes (the loop once ended silently, and the
GCS declared the node dead ten seconds later); a closed connection waits for the link to
reconnect, and a closed link ends it."""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace

from ember import config
from ember.protocol.errors import ConnectionClosedError
from ember.raylet.membership import Membership


class FakeGcs:
    """The GCS link (``gcs_link.GcsLink``) and its connection in one: closed once its
    outcomes are used up."""

    closed = False
    connected = True

    def __init__(self, outcomes: list) -> None:
        self.outcomes = outcomes
        self.calls = 0
        self.conn = self

    async def call(self, op: str, body: dict, timeout: float) -> dict:
        self.calls += 1
        outcome = self.outcomes.pop(0)
        self.closed = not self.outcomes
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome


def _raylet() -> SimpleNamespace:
    resources = SimpleNamespace(available_dict=dict, total_dict=dict)
    return SimpleNamespace(
        node_id=b"n",
        resources=resources,
        leases=SimpleNamespace(machine=SimpleNamespace(pending_demands=list)),
        store=SimpleNamespace(stats=dict),
    )


def test_a_failed_beat_is_logged_and_the_next_goes(monkeypatch, caplog) -> None:
    monkeypatch.setattr(config, "heartbeat_interval", 0.001)
    m = Membership(_raylet())  # type: ignore[arg-type]
    m.set_view = lambda view: None  # type: ignore[method-assign]
    gcs = FakeGcs([RuntimeError("a bug in a handler"), {"view": []}, ConnectionClosedError("x")])
    m.gcs = gcs  # type: ignore[assignment]
    caplog.set_level(logging.ERROR, logger="ember.raylet")
    asyncio.run(asyncio.wait_for(m.heartbeat(), 5))
    assert gcs.calls == 3  # the beat after the failure went, and the closed link ended it
    assert "a heartbeat to the GCS failed" in caplog.text and "a bug in a handler" in caplog.text
