"""The Serve controller: one detached, named actor that owns Serve's desired state.

Applications -> deployments -> (code version, config) are kept in the GCS KV (``kv``), so a
controller that was killed and restarted (``max_restarts=-1``) reads them back, finds the
replicas its predecessor started by their names, and carries on. Every tick each deployment
is reconciled (``deployment_state``); routing changes are published with an epoch that
handles and proxies long-poll (``listen``); the status and the recent decisions are written
to the KV for ``serve status`` and the dashboard, which do not import this package.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import os
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import cloudpickle
import ember
import ember.serve.kv as kv
from ember.serve.deployment_state import DeploymentSpec, DeploymentState
from ember.serve.exceptions import RayServeException
from ember.serve.metrics_collector import MetricsCollector
from ember.serve.names import (
    CONTROLLER_NAME,
    KV_APP_PREFIX,
    KV_CONFIG_REQUEST,
    KV_DECISIONS,
    KV_HTTP_OPTIONS,
    KV_REPLICAS,
    KV_REQUEST_METRICS,
    KV_STATUS,
    NAMESPACE,
    PROXY_NAME_PREFIX,
)

logger = logging.getLogger("ember.serve")
TICK_S = 0.05
STATUS_EVERY_S = 0.5
MAX_DECISIONS = 200  # the decision log's bound
NODES_EVERY_S = 2.0  # how often the proxies are matched to the alive nodes
# Ray's ProxyLocation values (and its older http_options location names)
PROXY_LOCATIONS = {
    "EveryNode": "EveryNode",
    "HeadOnly": "HeadOnly",
    "Disabled": "Disabled",
    "NoServer": "Disabled",
}
DEFAULT_HTTP_OPTIONS = {
    "host": "127.0.0.1",
    "port": 8000,
    "request_timeout_s": None,
    "max_body_bytes": 10 * 1024 * 1024,
    "keep_alive_timeout_s": 5,
}


@dataclass
class AppState:
    name: str
    route_prefix: str | None
    ingress: str
    deployments: dict[str, DeploymentState] = field(default_factory=dict)
    config: dict | None = None  # the app's entry of a `serve deploy` config, if deployed so
    deleting: bool = False
    error: str = ""
    was_running: bool = False
    deployed_at: float = field(default_factory=time.time)

    def status(self) -> str:
        if self.deleting:
            return "DELETING"
        if self.error:
            return "DEPLOY_FAILED"
        states = [d.status() for d in self.deployments.values()]
        if "UNHEALTHY" in states:
            return "UNHEALTHY" if self.was_running else "DEPLOY_FAILED"
        if all(s in ("HEALTHY", "UPSCALING", "DOWNSCALING") for s in states):
            self.was_running = True
            return "RUNNING"
        return "DEPLOYING"

    def message(self) -> str:
        if self.error:
            return self.error
        return "; ".join(f"{n}: {d.message}" for n, d in self.deployments.items() if d.message)


class ServeController:
    def __init__(self, http_options: dict | None = None) -> None:
        self.apps: dict[str, AppState] = {}
        self.epoch = 0
        self.changed = asyncio.Event()
        self.routing: Any = None
        self._routing_key: Any = None
        self.decisions: deque = deque(maxlen=MAX_DECISIONS)
        self.node_id = ember.get_runtime_context().get_node_id()
        stored = kv.get(KV_HTTP_OPTIONS)
        self.http_options = dict(DEFAULT_HTTP_OPTIONS)
        self.http_options.update(json.loads(stored) if stored else (http_options or {}))
        kv.put(KV_HTTP_OPTIONS, json.dumps(self.http_options).encode())
        self.location = proxy_location(self.http_options.get("location"))
        self.proxies: dict[str, Any] = {}  # node id -> its proxy actor
        self.proxy_ready: dict[str, Any] = {}  # node id -> the future of its ready()
        self.nodes_at = 0.0
        self.config_seq = -1
        self.last_written: dict[bytes, bytes] = {}
        self.status_at = 0.0
        # a restarted controller counts on from its predecessor's last record
        self.request_metrics = MetricsCollector(kv.get(KV_REQUEST_METRICS))
        self.stopping = False
        self.stopped = False
        self._recover()
        self._ensure_proxies()
        self.task = asyncio.get_event_loop().create_task(self._run())

    # -- recovery ------------------------------------------------------------------------
    def _recover(self) -> None:
        for key in kv.keys(KV_APP_PREFIX):
            blob = kv.get(key)
            if blob is None:
                continue
            try:
                saved = cloudpickle.loads(blob)
            except Exception as e:  # its code no longer imports: say so, keep the rest
                name = key[len(KV_APP_PREFIX) :].decode()
                self.apps[name] = AppState(name, None, "", error=f"could not restore: {e}")
                continue
            self._install(
                saved["name"],
                saved["route_prefix"],
                saved["specs"],
                saved["ingress"],
                saved.get("config"),
            )
        registry = json.loads(kv.get(KV_REPLICAS) or b"{}")
        for name, r in registry.items():
            app = self.apps.get(r["app"])
            ds = app.deployments.get(r["deployment"]) if app else None
            if ds is not None:
                ds.adopt(name, r["tag"], r["version"], r.get("stopping", False))
            else:  # a replica of something deleted meanwhile
                try:
                    ember.kill(ember.get_actor(name, namespace=NAMESPACE))
                except Exception:
                    pass
        if self.apps:
            self._log(
                "",
                "",
                "recovered",
                f"controller restarted: {len(self.apps)} application(s), {len(registry)} replica(s) found",
            )
        last = json.loads(kv.get(KV_CONFIG_REQUEST) or b"{}")
        if "ok" in last:  # answered; an unanswered one is applied by this controller
            self.config_seq = last.get("seq", -1)

    def _proxy_nodes(self) -> dict[str, str]:
        """{node id: node ip} of the nodes that should run a proxy."""
        if self.location == "Disabled":
            return {}
        alive = {n["NodeID"]: n["NodeManagerAddress"] for n in ember.nodes() if n["Alive"]}
        if self.location == "HeadOnly":
            return {self.node_id: alive.get(self.node_id, "")}
        return alive

    def _ensure_proxies(self) -> None:
        """A proxy on each node that should have one (Ray's ``proxy_location``: EveryNode by
        default, HeadOnly, Disabled); a dead node's proxy is forgotten."""
        from ember.serve.proxy import ProxyActor
        from ember.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        try:
            wanted = self._proxy_nodes()
        except Exception:  # the GCS is restarting: keep what runs, ask again next time
            return
        for node_id in list(self.proxies):
            if node_id not in wanted:
                handle = self.proxies.pop(node_id)
                self.proxy_ready.pop(node_id, None)
                try:
                    ember.kill(handle)
                except Exception:
                    pass  # its node is gone, and it with it
        for node_id, node_ip in wanted.items():
            if node_id in self.proxies:
                ready = self.proxy_ready[node_id]
                if ready.done() and ready.exception() is not None:
                    # unhealthy (its port taken, or it is restarting): asked again, so the
                    # status turns HEALTHY once it listens
                    self.proxy_ready[node_id] = self.proxies[node_id].ready.remote().future()
                continue
            options = dict(self.http_options, host=proxy_host(self.http_options, node_ip))
            self.proxies[node_id] = handle = (
                ember.remote(ProxyActor)
                .options(
                    name=PROXY_NAME_PREFIX + node_id,
                    namespace=NAMESPACE,
                    lifetime="detached",
                    get_if_exists=True,
                    max_restarts=-1,  # the runtime restarts a killed proxy; it reads its routes again
                    num_cpus=0,
                    scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
                )
                .remote(options)
            )
            self.proxy_ready[node_id] = handle.ready.remote().future()

    # -- desired state (called by serve.run / serve.delete / the config path) -------------
    def _log(self, app: str, deployment: str, kind: str, message: str) -> None:
        entry = {
            "time": time.time(),
            "app": app,
            "deployment": deployment,
            "kind": kind,
            "message": message,
        }
        self.decisions.append(entry)
        logger.info("%s %s/%s: %s", kind, app, deployment, message)

    def _install(
        self,
        name: str,
        prefix: str | None,
        specs: list[DeploymentSpec],
        ingress: str,
        config: dict | None,
    ) -> None:
        app = self.apps.get(name)
        if app is None:
            app = self.apps[name] = AppState(name, prefix, ingress)
        app.deleting = False  # deployed again while being deleted: its replicas are reused
        app.route_prefix, app.ingress, app.config, app.error = prefix, ingress, config, ""
        app.deployed_at = time.time()
        wanted = {s.name for s in specs}
        for spec in specs:
            ds = app.deployments.get(spec.name)
            if ds is None:
                app.deployments[spec.name] = DeploymentState(name, spec, self._log)
                self._log(
                    name,
                    spec.name,
                    "deployed",
                    f"version {spec.version[:8]}, {app.deployments[spec.name].target} replica(s)",
                )
            else:
                ds.update(spec)
        for dname, ds in app.deployments.items():
            if dname not in wanted:
                ds.delete()

    def deploy_application(
        self,
        name: str,
        route_prefix: str | None,
        specs: list[DeploymentSpec],
        ingress: str,
        config: dict | None = None,
    ) -> None:
        if self.stopping:
            raise RayServeException("Serve is shutting down; deploy again once it has stopped")
        if route_prefix is not None:
            for other in self.apps.values():
                if other.name != name and not other.deleting and other.route_prefix == route_prefix:
                    raise RayServeException(
                        f"route prefix {route_prefix!r} is already used by application "
                        f"{other.name!r}; give application {name!r} another route_prefix "
                        "(or delete the other one first)"
                    )
        self._install(name, route_prefix, specs, ingress, config)
        saved = {
            "name": name,
            "route_prefix": route_prefix,
            "specs": specs,
            "ingress": ingress,
            "config": config,
        }
        kv.put(KV_APP_PREFIX + name.encode(), cloudpickle.dumps(saved))

    def delete_application(self, name: str) -> bool:
        app = self.apps.get(name)
        if app is None:
            return False
        app.deleting = True
        for ds in app.deployments.values():
            ds.delete()
        kv.delete(KV_APP_PREFIX + name.encode())
        self._log(name, "", "deleted", "application deleted")
        return True

    async def apply_config(self, config: dict) -> dict:
        """A `serve deploy` config: declarative, so applications it omits are deleted.
        Returns {app name: error or ""}; a bad application leaves the others alone."""
        from ember.serve.schema import build_applications

        built = await asyncio.to_thread(build_applications, config)
        if isinstance(built, str):
            raise RayServeException(built)
        if config.get("http_options"):
            self.http_options.update(config["http_options"])
        if config.get("proxy_location"):
            try:
                self.location = proxy_location(config["proxy_location"])
            except ValueError as e:
                raise RayServeException(str(e)) from None
            self.http_options["location"] = self.location
            kv.put(KV_HTTP_OPTIONS, json.dumps(self.http_options).encode())
            self._ensure_proxies()
        results: dict[str, str] = {}
        for name, item in built.items():
            if isinstance(item, str):
                results[name] = item
                app = self.apps.get(name)
                if app is None:
                    self.apps[name] = app = AppState(name, None, "")
                app.error, app.config = (
                    item,
                    next((a for a in config["applications"] if a["name"] == name), None),
                )
                self._log(name, "", "failed", item)
                continue
            prefix, specs, ingress, app_config = item
            try:
                self.deploy_application(name, prefix, specs, ingress, app_config)
                results[name] = ""
            except RayServeException as e:
                results[name] = str(e)
        for name in list(self.apps):
            if name not in built:
                self.delete_application(name)
        return results

    def shutdown_all(self) -> None:
        for name in list(self.apps):
            self.delete_application(name)

    async def graceful_shutdown(self, timeout_s: float = 30.0) -> bool:
        """Deletes everything and waits (bounded) until every replica is gone."""
        self.shutdown_all()
        self.stopping = True
        deadline = time.monotonic() + timeout_s
        while self.apps and time.monotonic() < deadline:
            await asyncio.sleep(TICK_S)
        for proxy in list(self.proxies.values()):
            try:
                await asyncio.wait_for(proxy.stop.remote(), 5.0)
            except Exception:
                pass
            try:
                ember.kill(proxy)
            except Exception:
                pass  # its node is gone
        self.proxies.clear()
        self.proxy_ready.clear()
        self.stopped = True  # no tick writes the KV again
        for key in (
            KV_REPLICAS,
            KV_STATUS,
            KV_HTTP_OPTIONS,
            KV_DECISIONS,
            KV_CONFIG_REQUEST,
            KV_REQUEST_METRICS,
        ):
            kv.delete(key)
        return not self.apps

    async def _shutdown_on_request(self, seq: int) -> None:
        await self.graceful_shutdown()
        kv.put(KV_CONFIG_REQUEST, json.dumps({"seq": seq, "ok": True}).encode())
        await asyncio.sleep(0.2)  # the reply is written; now this actor goes too
        ember.kill(ember.get_actor(CONTROLLER_NAME, namespace=NAMESPACE))

    # -- reading -------------------------------------------------------------------------
    async def listen(self, epoch: int, timeout_s: float) -> tuple[int, dict]:
        """The routing snapshot, once it is newer than ``epoch`` (or after ``timeout_s``)."""
        if epoch == self.epoch:
            try:
                await asyncio.wait_for(self.changed.wait(), timeout_s)
            except TimeoutError:
                pass
        return self.epoch, self.routing or self._routing()

    async def wait_proxy(self) -> dict:
        """The address of the proxy on this controller's node once it listens; its error
        (e.g. the port is taken) if not; {} when no proxy runs there (Disabled)."""
        if self.node_id not in self.proxy_ready:
            self._ensure_proxies()
        ready = self.proxy_ready.get(self.node_id)
        return {} if ready is None else await asyncio.wrap_future(ready)

    async def wait_routed(self, timeout_s: float) -> bool:
        """Waits (bounded) until the proxy routes with this controller's latest routing, so an
        application that serve.run reported running answers HTTP at once."""
        epoch, deadline = self.epoch, time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            # the proxies that listen (one that could not, e.g. its port is taken, is in
            # the status as UNHEALTHY and is not waited for)
            serving = [
                self.proxies[n]
                for n, ready in self.proxy_ready.items()
                if n in self.proxies and ready.done() and ready.exception() is None
            ]
            if serving:
                try:
                    epochs = await asyncio.gather(*(p.routing_epoch.remote() for p in serving))
                except Exception:
                    epochs = [-1]  # one is restarting: ask again
                if min(epochs) >= epoch:
                    return True
            elif not self.proxy_ready:
                return True  # no proxy (Disabled): nothing routes by HTTP
            await asyncio.sleep(0.02)
        return False

    def get_status(self) -> dict:
        return self._status()

    def get_decisions(self) -> list[dict]:
        return list(self.decisions)

    def get_http_options(self) -> dict:
        return dict(self.http_options)

    def app_names(self) -> dict[str, str]:
        """{app: its ingress deployment}."""
        return {n: a.ingress for n, a in self.apps.items() if not a.deleting}

    def replica_died(self, app: str, deployment: str, tag: str, reason: str) -> None:
        """A router saw a replica die: replace it now rather than at its next health check."""
        ds = self.apps.get(app, AppState("", None, "")).deployments.get(deployment)
        if ds is not None:
            ds.replica_died(tag, reason)

    # -- the loop ------------------------------------------------------------------------
    async def _run(self) -> None:
        while not self.stopped:
            try:
                self._tick()
            except Exception:
                logger.exception("controller tick failed (continuing)")
            await asyncio.sleep(TICK_S)

    def _tick(self) -> None:
        now = time.monotonic()
        for name, app in list(self.apps.items()):
            for dname, ds in list(app.deployments.items()):
                ds.tick(now)
                if ds.finished():
                    del app.deployments[dname]
            if app.deleting and not app.deployments:
                del self.apps[name]
        self._publish()
        # at once: a controller killed now must find every replica it started
        self._write(KV_REPLICAS, json.dumps(self._registry()).encode())
        if now - self.nodes_at >= NODES_EVERY_S:
            self.nodes_at = now
            self._ensure_proxies()
        if now - self.status_at >= STATUS_EVERY_S:
            self.status_at = now
            self._check_config_request()
            self._write(KV_STATUS, json.dumps(self._status()).encode())
            self._write(KV_DECISIONS, json.dumps(list(self.decisions)[-50:]).encode())
        record = self.request_metrics.tick(now, self.proxies, self.node_id, self.apps)
        if record is not None:
            self._write(KV_REQUEST_METRICS, json.dumps(record).encode())

    def _write(self, key: bytes, value: bytes) -> None:
        if self.last_written.get(key) != value:
            kv.put(key, value)
            self.last_written[key] = value

    def _check_config_request(self) -> None:
        """The dashboard's PUT /api/serve/applications/ leaves its config here (it does not
        import Serve); the outcome goes back under the same key with the same seq."""
        raw = kv.get(KV_CONFIG_REQUEST)
        if not raw:
            return
        req = json.loads(raw)
        if req.get("seq", -1) <= self.config_seq or "ok" in req:
            return
        self.config_seq = req["seq"]
        if req.get("shutdown"):
            asyncio.get_event_loop().create_task(self._shutdown_on_request(req["seq"]))
            return

        async def apply() -> None:
            try:
                errors = await self.apply_config(req["config"])
                reply = {"seq": req["seq"], "ok": True, "errors": errors}
            except Exception as e:
                reply = {"seq": req["seq"], "ok": False, "error": str(e)}
            kv.put(KV_CONFIG_REQUEST, json.dumps(reply).encode())

        asyncio.get_event_loop().create_task(apply())

    def _routing(self) -> dict:
        routes, replicas, queues = {}, {}, {}
        for name, app in self.apps.items():
            if app.deleting:
                continue
            if app.route_prefix is not None and app.ingress:
                routes[app.route_prefix] = {"app": name, "ingress": app.ingress}
            for dname, ds in app.deployments.items():
                replicas[f"{name}#{dname}"] = ds.routable()
                queues[f"{name}#{dname}"] = ds.spec.config.max_queued_requests
        return {"routes": routes, "replicas": replicas, "queues": queues}

    def _publish(self) -> None:
        routing = self._routing()
        key = (
            routing["routes"],
            {k: [(t, m) for t, _, m in v] for k, v in routing["replicas"].items()},
            routing["queues"],
        )
        if self.routing is not None and key == self._routing_key:
            return
        self.routing, self._routing_key = routing, key
        self.epoch += 1
        self.changed.set()
        self.changed = asyncio.Event()

    def _registry(self) -> dict:
        return {
            r.name: {
                "app": app.name,
                "deployment": dname,
                "tag": r.tag,
                "version": r.version,
                "stopping": r.state == "STOPPING",
            }
            for app in self.apps.values()
            for dname, ds in app.deployments.items()
            for r in ds.replicas
        }

    def _status(self) -> dict:
        apps = {}
        for name, app in self.apps.items():
            deployments = {}
            for dname, ds in app.deployments.items():
                deployments[dname] = {
                    "name": dname,
                    "status": ds.status(),
                    "message": ds.message,
                    "target_num_replicas": ds.target,
                    "version": ds.spec.version,
                    "deployment_config": _jsonable(ds.spec.config.to_dict()),
                    "replicas": [
                        {
                            "replica_id": r.tag,
                            "state": r.state,
                            "actor_name": r.name,
                            "version": r.version,
                            "start_time_s": r.started_wall,
                            **r.info,
                        }
                        for r in ds.replicas
                    ],
                }
            apps[name] = {
                "name": name,
                "route_prefix": app.route_prefix,
                "status": app.status(),
                "message": app.message(),
                "last_deployed_time_s": app.deployed_at,
                "deployed_app_config": app.config,
                "ingress": app.ingress,
                "deployments": deployments,
            }
        proxies = {}
        for node_id, ready in self.proxy_ready.items():
            state = "STARTING"
            if ready.done():
                state = "HEALTHY" if ready.exception() is None else "UNHEALTHY"
            proxies[node_id] = {"node_id": node_id, "status": state}
        return {
            "applications": apps,
            "http_options": self.http_options,
            "proxies": proxies,
            "proxy_location": self.location,
            "controller": {"node_id": self.node_id, "epoch": self.epoch, "pid": os.getpid()},
        }


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def proxy_location(value: Any) -> str:
    """Ray's ``proxy_location`` (a ``ProxyLocation`` or its name) as EveryNode, HeadOnly or
    Disabled; EveryNode when unset, as Ray 2.x."""
    if value is None:
        return "EveryNode"
    name = getattr(value, "value", value)
    if name not in PROXY_LOCATIONS:
        raise ValueError(
            f"proxy_location must be one of EveryNode, HeadOnly, Disabled, got {value!r}"
        )
    return PROXY_LOCATIONS[name]


def proxy_host(http_options: dict, node_ip: str) -> str:
    """The address a node's proxy binds: ``http_options``' host; but a loopback host on a
    node whose own address is another loopback address (several nodes on one machine, as
    127.0.0.2, ...) binds that node's address, so each node's proxy stays on loopback and
    has an address of its own."""
    host = http_options.get("host", "127.0.0.1")
    try:
        same_machine = ipaddress.ip_address(host).is_loopback and (
            ipaddress.ip_address(node_ip).is_loopback
        )
    except ValueError:
        return host
    return node_ip if same_machine else host
