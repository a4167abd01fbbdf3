"""``/metrics`` under concurrent scrapes: same parameters share the render in flight, other
parameters do not, and a scrape after a render is done renders afresh (no stale cache)."""

from __future__ import annotations

import asyncio
import time

from ember.dashboard import prometheus
from ember.dashboard.app import DashboardContext
from ember.dashboard.state import DashboardState

NODES = ("a" * 28, "b" * 28)


def _ctx() -> DashboardContext:
    state = DashboardState()
    for nid in NODES:
        state.update_node(nid, {"node_ip": "10.0.0.1"})
        state.node_metrics(nid, time.time(), {"cpu_percent": 1.0})
    return DashboardContext(state=state)


def test_concurrent_scrapes_share_a_render_per_parameters(monkeypatch):
    renders: list[tuple[str | None, bool]] = []
    collect = prometheus.EmberCollector.collect

    def counted(self):
        renders.append((self.node_id, self.cluster))
        return collect(self)

    monkeypatch.setattr(prometheus.EmberCollector, "collect", counted)
    ctx = _ctx()

    async def scrape_all() -> list[bytes]:
        same = [prometheus.render_shared(ctx) for _ in range(10)]
        node_a = [prometheus.render_shared(ctx, node_id=NODES[0]) for _ in range(3)]
        node_b = [prometheus.render_shared(ctx, node_id=NODES[1]) for _ in range(3)]
        cluster = [prometheus.render_shared(ctx, cluster=True) for _ in range(2)]
        return await asyncio.gather(*same, *node_a, *node_b, *cluster)

    bodies = asyncio.run(scrape_all())
    assert sorted(renders, key=str) == sorted(
        [(None, False), (NODES[0], False), (NODES[1], False), (None, True)], key=str
    )
    everything, a, b, cluster = bodies[0], bodies[10], bodies[13], bodies[16]
    assert all(body == everything for body in bodies[:10])
    assert all(body == a for body in bodies[10:13]) and all(body == b for body in bodies[13:16])
    # Each node's scrape has its own series only; the cluster scope has no node's.
    assert NODES[0].encode() in a and NODES[1].encode() not in a
    assert NODES[1].encode() in b and NODES[0].encode() not in b
    assert NODES[0].encode() not in cluster and b"ember_tasks" in cluster
    assert NODES[0].encode() in everything and NODES[1].encode() in everything
    assert prometheus._IN_FLIGHT == {}  # nothing kept once done

    # After the render is done, a scrape sees the state as it is now.
    ctx.state.update_node("c" * 28, {"node_ip": "10.0.0.2"})
    ctx.state.node_metrics("c" * 28, time.time(), {"cpu_percent": 1.0})
    body = asyncio.run(prometheus.render_shared(ctx))
    assert b"c" * 28 in body and len(renders) == 5


def test_a_failed_render_fails_every_waiting_scrape_and_the_next_one_retries(monkeypatch):
    calls = []

    def broken(self):
        calls.append(1)
        raise RuntimeError("state unreadable")
        yield  # a generator, as the real one

    monkeypatch.setattr(prometheus.EmberCollector, "collect", broken)
    ctx = _ctx()

    async def scrape_all() -> list:
        return await asyncio.gather(
            *(prometheus.render_shared(ctx) for _ in range(4)), return_exceptions=True
        )

    results = asyncio.run(scrape_all())
    assert all(isinstance(r, RuntimeError) for r in results) and len(calls) == 1
    assert prometheus._IN_FLIGHT == {}
    monkeypatch.undo()
    assert b"ember_node_up" in asyncio.run(prometheus.render_shared(ctx))
