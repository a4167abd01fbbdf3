"""``/metrics``: the cluster's metrics in the Prometheus text format, and the
file service-discovery list of the nodes' metrics endpoints.

Everything is read at scrape time from the dashboard's state (what the agents streamed and
the GCS poll brought), by one custom collector: nothing is kept twice. Two name sets:

- Ember's own (``prom_ember``): ``ember_*`` names with units, bounded labels; it passes
  ``promtool check metrics``.
- Ray's (``prom_ray``), with ``?compat=ray``: Ray's names and labels for what Ember knows, for
  the Grafana dashboards Ray users already have.

``/metrics?node_id=ID`` (or a unique prefix of it) serves one node's series;
``/metrics?scope=cluster`` the cluster-wide ones (tasks, actors, demands, the dashboard's own
cost). The service-discovery file lists one target per node with that parameter, so
Prometheus labels each node's series by target while a plain ``/metrics`` scrape still gets
everything; ``compat`` goes with either (a scrape job's ``params``).
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator
from typing import Annotated, Any

from ember.dashboard import prom_ember, prom_ray
from ember.dashboard.app import DashboardContext, get_ctx
from ember.dashboard.autoscaler import prom as autoscaler_prom
from ember.dashboard.prom_readings import MAX_LABEL_VALUES, OTHER, live_nodes
from ember.dashboard.prom_user import user_metrics
from ember.dashboard.routes.nodes import resolve_node
from ember.dashboard.serve import prom as serve_prom
from ember.listen_rules import is_wildcard
from fastapi import APIRouter, Depends, Query, Response
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import Metric

__all__ = ["MAX_LABEL_VALUES", "OTHER", "EmberCollector", "render", "render_shared", "router"]

SD_FILE = "prom_metrics_service_discovery.json"
# The classic text format: every Prometheus (Debian's 2.42 too) parses it; our names and
# labels are plain ASCII, so the newer 1.0.0 format would add nothing.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

router = APIRouter(tags=["metrics"])


class EmberCollector:
    """Yields every metric family from a ``DashboardState`` at each scrape: a node's (or every
    node's) series unless ``cluster``, the cluster-wide ones unless a node is asked for;
    Ember's names, or Ray's with ``compat="ray"``."""

    def __init__(
        self, ctx: DashboardContext, node_id: str | None, cluster: bool, compat: str | None = None
    ) -> None:
        self.ctx = ctx
        self.node_id = node_id
        self.cluster = cluster
        self.compat = compat

    def collect(self) -> Iterator[Metric]:
        if self.compat == "ray":
            yield from self._ray()
        else:
            yield from self._ember()

    def _ember(self) -> Iterator[Metric]:
        st = self.ctx.state
        if self.node_id is not None or not self.cluster:
            nodes = [
                (nid, n)
                for nid, n in st.nodes.items()
                if self.node_id is None or nid == self.node_id
            ]
            own: list[Metric] = [
                *prom_ember.node_metrics(nodes),
                *prom_ember.agent_metrics(nodes),
                *prom_ember.component_metrics(st, nodes),
            ]
            yield from own
            taken = prom_ember.CLUSTER_FAMILIES | {f.name.removeprefix("ember_") for f in own}
            yield from user_metrics(nodes, "ember_", taken)
        if self.node_id is None:
            yield from prom_ember.cluster_metrics(st)
            yield from prom_ember.dashboard_metrics(st)
            yield from prom_ember.job_metrics(self.ctx.extra.get("jobs"))
            scaler = autoscaler_prom.fresh_record(st)
            if scaler is not None:
                yield from autoscaler_prom.metrics(scaler, None)
            serve = serve_prom.fresh_record(st)
            if serve is not None:
                yield from serve_prom.metrics(serve, None)

    def _session(self) -> str:
        session_dir = self.ctx.session_dir
        return os.path.basename(os.path.normpath(session_dir)) if session_dir else ""

    def _ray(self) -> Iterator[Metric]:
        st = self.ctx.state
        session = self._session()
        if self.node_id is not None or not self.cluster:
            nodes = live_nodes(st, self.node_id)
            yield from prom_ray.node_metrics(st, nodes, session)
            yield from user_metrics(nodes, "ray_", prom_ray.RESERVED, {"SessionName": session})
        if self.node_id is None:
            scaler = autoscaler_prom.fresh_record(st)
            for family in prom_ray.cluster_metrics(st, session):
                # An autoscaler runs: its record, not the node table, says these.
                if scaler is None or family.name not in autoscaler_prom.FAMILIES:
                    yield family
            if scaler is not None:
                yield from autoscaler_prom.metrics(scaler, session)
            serve = serve_prom.fresh_record(st)
            if serve is not None:
                yield from serve_prom.metrics(serve, session)


class _Families:
    """A collector of metric families already built (what ``_format`` turns into text)."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> list[Metric]:
        return self.families


def _format(families: list[Metric]) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(families))  # type: ignore[arg-type]
    return generate_latest(registry)


def render(
    ctx: DashboardContext,
    node_id: str | None = None,
    cluster: bool = False,
    compat: str | None = None,
) -> bytes:
    return _format(list(EmberCollector(ctx, node_id, cluster, compat).collect()))


_Key = tuple[int, str | None, bool, str | None]
# Renders in flight, by (context, node_id, cluster, compat): a scrape arriving while one with
# the same parameters renders waits for that render instead of starting its own (single flight).
_IN_FLIGHT: dict[_Key, asyncio.Task[bytes]] = {}


async def render_shared(
    ctx: DashboardContext,
    node_id: str | None = None,
    cluster: bool = False,
    compat: str | None = None,
) -> bytes:
    """``render``, shared by concurrent scrapes with the same parameters: 20 Prometheus
    servers scraping at once cost one render, not 20 in a row on the loop. Nothing is kept
    once the render is done: the next scrape renders afresh."""
    key = (id(ctx), node_id, cluster, compat)  # ctx is alive while its render is in the dict
    task = _IN_FLIGHT.get(key)
    if task is None or task.done():
        task = asyncio.ensure_future(_render_async(ctx, node_id, cluster, compat))
        _IN_FLIGHT[key] = task
        task.add_done_callback(lambda t: _finished(key, t))
    # Shielded: a scraper that goes away does not cancel the render the others wait for.
    return await asyncio.shield(task)


async def _render_async(
    ctx: DashboardContext, node_id: str | None, cluster: bool, compat: str | None
) -> bytes:
    # The families are read from the state here, on the loop that owns it (it takes no
    # locks); the text is made from these copies in a worker thread, which leaves the loop
    # free meanwhile to take the scrapes that will share this render.
    families = list(EmberCollector(ctx, node_id, cluster, compat).collect())
    return await asyncio.to_thread(_format, families)


def _finished(key: _Key, task: asyncio.Task[bytes]) -> None:
    if _IN_FLIGHT.get(key) is task:
        del _IN_FLIGHT[key]
    if not task.cancelled():
        task.exception()  # retrieved: every scraper waiting got it (no "never retrieved" log)


@router.get("/metrics", response_class=Response)
async def metrics(
    node_id: Annotated[
        str | None, Query(max_length=64, description="only this node's series")
    ] = None,
    scope: Annotated[
        str | None, Query(pattern="^cluster$", description="'cluster': cluster-wide series only")
    ] = None,
    compat: Annotated[
        str | None,
        Query(pattern="^ray$", description="'ray': Ray's metric names and labels instead"),
    ] = None,
    ctx: DashboardContext = Depends(get_ctx),
) -> Response:
    """Prometheus text format (exposition 0.0.4). Async on purpose: the state is read on the
    loop that owns it (which takes no locks), never beside ingestion in a worker thread;
    concurrent scrapes with the same parameters share one render (``render_shared``)."""
    if node_id is not None:
        node_id = resolve_node(ctx, node_id)  # a unique prefix works, as everywhere
    body = await render_shared(ctx, node_id=node_id, cluster=scope == "cluster", compat=compat)
    return Response(content=body, media_type=CONTENT_TYPE)


# -- file service discovery -----------------------------------------------------------------


def service_discovery(ctx: DashboardContext) -> list[dict[str, Any]]:
    """Prometheus ``file_sd_configs`` groups: the cluster-wide target and one per live node
    (each a ``/metrics`` URL parameter on this dashboard, which serves every node). A node's
    target is named by its own ``instance`` (its ip and the start of its id), not the
    dashboard's address they share: Ray's panels plot per node ``by (instance)``."""
    host = ctx.host
    if is_wildcard(host):  # bound everywhere: name the head node's address
        head = [n for n in ctx.state.nodes.values() if n.info.get("is_head")]
        host = str(head[0].info.get("node_ip") or "127.0.0.1") if head else "127.0.0.1"
    target = f"[{host}]:{ctx.port}" if ":" in host else f"{host}:{ctx.port}"
    extra = {"__metrics_path__": f"{ctx.prefix}/metrics"} if ctx.prefix else {}
    groups = [{"targets": [target], "labels": {"__param_scope": "cluster", **extra}}]
    for nid, node in sorted(ctx.state.nodes.items()):
        if node.state != "ALIVE":
            continue
        groups.append(
            {
                "targets": [target],
                "labels": {
                    "__param_node_id": nid,
                    "instance": f"{node.info.get('node_ip') or host}:{nid[:8]}",
                    "ember_node_id": nid,
                    "ember_node_ip": str(node.info.get("node_ip") or ""),
                    **extra,
                },
            }
        )
    return groups


def write_service_discovery(ctx: DashboardContext, path: str | None = None) -> str | None:
    """Writes the file (atomically) when its content changed; returns its path."""
    path = path or (os.path.join(ctx.session_dir, SD_FILE) if ctx.session_dir else None)
    if path is None:
        return None
    text = json.dumps(service_discovery(ctx), indent=1)
    try:
        with open(path) as f:
            if f.read() == text:
                return path
    except OSError:
        pass
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)
    return path


async def service_discovery_loop(ctx: DashboardContext, period: float = 2.0) -> None:
    """Keeps the file current as nodes come and go (the dashboard server runs this)."""
    while True:
        try:
            write_service_discovery(ctx)
        except OSError:
            pass  # the session dir is going away; the next round tries again
        await asyncio.sleep(period)
