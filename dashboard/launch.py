"""Starting the dashboard (head only) and the node's agent: the one place ``LocalNode`` and
``ember start`` call. The dashboard is a child spawned through ``spawn(name, argv)``, the
node's own spawner (which ties it to the driver, waits for its ready line and stops it); the
agent's arguments go to the raylet, which starts and supervises it (``agent_supervisor``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# spawn(name, argv) -> the ready line; the node's spawner (LocalNode.spawn_ready).
Spawner = Callable[[str, list[str]], str]


def start_dashboard(
    spawn: Spawner,
    *,
    session_dir: str,
    gcs_address: str,
    host: str = "127.0.0.1",
    port: int | None = None,
    url_prefix: str = "",
    token_file: str | None = None,
    agent_host: str = "",
) -> tuple[str, str]:
    """Starts the dashboard; returns (its URL, the gRPC address agents stream to).
    ``agent_host``: where the agents' hub listens (default: ``host``)."""
    from ember.dashboard.config import DEFAULT_PORT

    argv = [
        "-m",
        "ember.dashboard.server",
        "--session-dir",
        session_dir,
        "--host",
        host,
        "--port",
        str(DEFAULT_PORT if port is None else port),
        "--gcs-address",
        gcs_address,
    ]
    if url_prefix:
        argv += ["--url-prefix", url_prefix]
    if token_file:
        argv += ["--token-file", token_file]
    if agent_host:
        argv += ["--agent-host", agent_host]
    url, agent_address = spawn("dashboard", argv).split()
    return url, agent_address


def node_agent_argv(
    *,
    node_id: str,
    session_dir: str,
    raylet_address: str,
    gcs_address: str = "",
    dashboard_address: str = "",
    node_ip: str = "127.0.0.1",
    head: bool = False,
    components: dict[str, Any] | None = None,
    token_file: str | None = None,
) -> list[str]:
    """The agent's arguments. The raylet starts the agent with them (its ``--agent``),
    restarts it when it dies and stops it (``agent_supervisor``). Without a dashboard
    address the agent looks the head's up in the GCS (worker nodes of a cluster)."""
    argv = [
        "--node-id",
        node_id,
        "--session-dir",
        session_dir,
        "--raylet-address",
        raylet_address,
        "--gcs-address",
        gcs_address,
        "--node-ip",
        node_ip,
    ]
    if dashboard_address:
        argv += ["--dashboard-address", dashboard_address]
    if head:
        argv.append("--head")
    if components:
        argv += ["--components", ",".join(f"{k}={v}" for k, v in components.items())]
    if token_file:
        argv += ["--token-file", token_file]
    return argv


def _gcs_address_of(node: Any) -> str:
    # A cluster node's GCS speaks TCP with the cluster token; on the head the dashboard and
    # agent use its Unix socket instead, like the node's other processes.
    return getattr(node, "gcs_unix_address", "") or node.gcs_address


def start_dashboard_for(node: Any) -> tuple[str, str]:
    """``LocalNode.start``'s call before the raylet: the dashboard on the head (unless
    disabled); returns (its URL, the gRPC address agents stream to), or ('', '')."""
    options = node.dashboard
    if not node.head or options.include is False:
        return "", ""
    return start_dashboard(
        node.spawn_ready,
        session_dir=node.session_dir,
        gcs_address=_gcs_address_of(node),
        host=options.host,
        port=options.port,
        url_prefix=options.url_prefix,
        token_file=getattr(node, "token_file", "") or None,
        # A cluster's agents on other machines stream to the hub: it listens on the node
        # IP (with the cluster token, see server.py), like the node's other TCP listeners;
        # the embedded node's hub stays on loopback. The HTTP port keeps --dashboard-host.
        agent_host=node.node_ip if node.cluster else "127.0.0.1",
    )


def agent_argv_for(node: Any, dashboard_address: str) -> list[str]:
    """The arguments of ``node``'s agent, which its raylet starts (the raylet adds itself to
    the components it labels)."""
    components = {name: p.pid for name, p in node.procs.items() if name != "raylet"}
    if node.tied_to:
        components["driver"] = node.tied_to
    return node_agent_argv(
        node_id=node.node_id.hex(),
        session_dir=node.session_dir,
        raylet_address=node.raylet_address,
        gcs_address=_gcs_address_of(node),
        dashboard_address=dashboard_address,
        node_ip=node.node_ip,
        head=node.head,
        components=components,
        token_file=getattr(node, "token_file", "") or None,
    )
