"""Starting the dashboard (head only) and the node's agent: the one place ``LocalNode`` and
``ember start`` call. Both are children spawned through ``spawn(name, argv)``, the node's own
spawner (which ties them to the driver, waits for their ready line and stops them)."""

from __future__ import annotations

import os
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


def start_node_agent(
    spawn: Spawner,
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
    watch_pid: int = 0,
) -> str:
    """Starts the agent under its supervisor; returns its socket address. Without a dashboard
    address it looks the head's up in the GCS (worker nodes of a cluster)."""
    # Run as a file, not ``-m``: ``-m`` would import the ``ember`` package (~15 MB) first.
    # ``--process-name`` keeps "ember." in its command line for ps and leak checks.
    argv = [
        os.path.join(os.path.dirname(os.path.abspath(__file__)), "agent_supervisor.py"),
        "--process-name",
        "ember.dashboard.agent_supervisor",
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
    if watch_pid:
        argv += ["--watch-pid", str(watch_pid)]
    return spawn("agent", argv)


def start_node_agents_for(node: Any) -> str:
    """``LocalNode.start``'s one call: the dashboard on the head (unless disabled), then the
    agent; returns the dashboard's URL ('' without one)."""
    url, agent_address = "", ""
    options = node.dashboard
    # A cluster node's GCS speaks TCP with the cluster token; on the head the dashboard and
    # agent use its Unix socket instead, like the node's other processes.
    gcs_address = getattr(node, "gcs_unix_address", "") or node.gcs_address
    token_file = getattr(node, "token_file", "") or None
    if node.head and options.include is not False:
        url, agent_address = start_dashboard(
            node.spawn_ready,
            session_dir=node.session_dir,
            gcs_address=gcs_address,
            host=options.host,
            port=options.port,
            url_prefix=options.url_prefix,
            token_file=token_file,
            # A cluster's agents on other machines stream to the hub: it listens on the node
            # IP (with the cluster token, see server.py), like the node's other TCP listeners;
            # the embedded node's hub stays on loopback. The HTTP port keeps --dashboard-host.
            agent_host=node.node_ip if node.cluster else "127.0.0.1",
        )
    components = {name: p.pid for name, p in node.procs.items() if name not in ("agent",)}
    if node.tied_to:
        components["driver"] = node.tied_to
    start_node_agent(
        node.spawn_ready,
        node_id=node.node_id.hex(),
        session_dir=node.session_dir,
        raylet_address=node.raylet_address,
        gcs_address=gcs_address,
        dashboard_address=agent_address,
        node_ip=node.node_ip,
        head=node.head,
        components=components,
        token_file=token_file,
        # A daemon node (ember start) has no parent process to tie the agent to: its
        # supervisor watches the raylet, so a raylet that shuts down (its head gone) takes it.
        watch_pid=node.procs["raylet"].pid
        if node.tied_to is None and "raylet" in node.procs
        else 0,
    )
    return url
