"""The raylet's heartbeat loop (``raylet/membership.py``) with a fake GCS: an unexpected
error in one beat is logged and the next beat goes (the loop once ended silently, and the
GCS declared the node dead ten seconds later); a closed connection waits for the link to
reconnect, and a closed link ends it; ``beat_soon`` sends the next beat before the interval
is up, never two within EARLY_BEAT_GAP_S."""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace

from ember import config
from ember.protocol.errors import ConnectionClosedError
from ember.raylet.membership import EARLY_BEAT_GAP_S, Membership


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
        leases=SimpleNamespace(
            pending_demands=list, machine=SimpleNamespace(idle_for=lambda: None)
        ),
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


def test_beat_soon_sends_the_next_beat_at_once_but_not_two_within_the_gap(monkeypatch) -> None:
    monkeypatch.setattr(config, "heartbeat_interval", 30.0)  # no beat by the interval here
    m = Membership(_raylet())  # type: ignore[arg-type]
    m.set_view = lambda view: None  # type: ignore[method-assign]
    beats: list[float] = []

    class Recording(FakeGcs):
        async def call(self, op: str, body: dict, timeout: float) -> dict:
            beats.append(asyncio.get_running_loop().time())
            return await super().call(op, body, timeout)

    gcs = Recording([{"view": []}, {"view": []}, {"view": []}])
    m.gcs = gcs  # type: ignore[assignment]

    async def run() -> float:
        loop = asyncio.get_running_loop()
        beating = asyncio.ensure_future(m.heartbeat())
        await asyncio.sleep(0.05)
        asked = loop.time()
        for _ in range(3):  # asked three times at once, then again twice
            m.beat_soon()
        while len(beats) < 1:
            await asyncio.sleep(0.005)
        m.beat_soon()
        while len(beats) < 2:
            await asyncio.sleep(0.005)
        m.beat_soon()
        while len(beats) < 3:
            await asyncio.sleep(0.005)
        beating.cancel()
        return asked

    asked = asyncio.run(asyncio.wait_for(run(), 10))
    assert len(beats) == 3
    assert beats[0] - asked < 0.5  # not the 30 s interval
    gaps = [b - a for a, b in zip(beats, beats[1:], strict=False)]
    assert all(g >= EARLY_BEAT_GAP_S * 0.9 for g in gaps), gaps
