"""Starting the dashboard (head only) and the node's agent: the one place ``LocalNode`` and
``ember start`` call. The dashboard is a child spawned through ``spawn(name, argv, fds)``, the
node's own spawner (which ties it to the driver and stops it), which returns a function that
waits for its ready line. The head's agent runs in the dashboard's process (its arguments go
with the dashboard's); on any other node, or a head without a dashboard, the agent's
arguments go to the raylet, which starts and supervises it (``ember.raylet.child_supervisor``).

The node binds the dashboard's HTTP port itself and hands the socket over, so the URL is known
at once and a request sent before the server is up waits in the socket's backlog; an embedded
node's agents stream to a Unix socket named in advance. So ``init()`` need not wait for the
dashboard (about 0.7 s of imports) to serve: it starts beside the rest.
"""

from __future__ import annotations

import errno
import json
import os
import socket
from collections.abc import Callable
from typing import Any, NamedTuple

from ember.listen_rules import shown_host

# spawn(name, argv, fds to hand over) -> wait(), which returns the ready line (LocalNode).
Spawner = Callable[[str, list[str], tuple[int, ...]], Callable[[], str]]
DEFAULT_PORT = 8265  # the dashboard's HTTP port, as Ray's
PORT_TRIES = 100
DASHBOARD_MODULE = "ember.dashboard.server"


class DashboardStart(NamedTuple):
    url: str
    wait: Callable[[], str]  # -> the address the agents stream to, once it serves
    # DASHBOARD_MODULE's arguments but --fd, its host and bound port: what the raylet
    # needs to start it again on the same URL if it dies (dashboard_supervisor).
    restart: dict[str, Any]


def bind_port(host: str, port: int, exact: bool = False) -> tuple[socket.socket, int]:
    """A listening socket on ``port``, or the next free one above it (port 0: any; with
    ``exact``, that port or ``OSError``)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    last: OSError | None = None
    tries = 1 if exact or port == 0 else PORT_TRIES
    for candidate in range(port, port + tries):
        # proto=IPPROTO_TCP matters: asyncio only sets TCP_NODELAY on such sockets, and
        # without it a keep-alive client waits 40 ms (Nagle + delayed ACK) per response.
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            sock.bind((host, candidate))
            # With SO_REUSEADDR two processes can both bind a port no one listens on yet;
            # the second to listen is refused, and moves on as a refused bind does.
            sock.listen(512)
        except OSError as e:
            sock.close()
            last = e
            if e.errno != errno.EADDRINUSE:
                raise
            continue
        sock.set_inheritable(False)
        return sock, sock.getsockname()[1]
    if exact:
        raise OSError(f"port {port} on {host} is taken ({last})")
    raise OSError(
        f"ports {port}-{port + PORT_TRIES - 1} on {host} are all taken ({last}); "
        "pass dashboard_port="
    )


def url_prefix_of(prefix: str) -> str:
    """ "ember", "/ember/" and "/ember" are one prefix: "/ember" ("" for none)."""
    return "/" + prefix.strip("/") if prefix.strip("/") else ""


def dashboard_url(host: str, port: int, prefix: str) -> str:
    shown = shown_host(host)
    return f"http://{shown}:{port}{url_prefix_of(prefix)}"


def hub_socket_address(session_dir: str) -> str:
    """Where an embedded node's dashboard hears its agent: a Unix socket in the session."""
    return "unix:" + os.path.join(session_dir, "sockets", "dashboard_hub")


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
    node_agent: list[str] | None = None,
) -> DashboardStart:
    """Starts the dashboard on a port bound here (``port``, or the next free one); returns
    its URL, ``wait()``, which waits until it serves and returns the address its agents
    stream to, and how to start it again (``restart``, for the raylet's
    ``DashboardSupervisor``). ``agent_host``: where the agents' hub listens (default:
    ``host``; a ``unix:`` address for an embedded node). ``node_agent``: the arguments of
    this node's agent, which then runs in the dashboard's process."""
    sock, bound = bind_port(host, DEFAULT_PORT if port is None else port)
    argv = [
        "-m",
        DASHBOARD_MODULE,
        "--session-dir",
        session_dir,
        "--host",
        host,
        "--port",
        str(bound),
        "--gcs-address",
        gcs_address,
    ]
    if url_prefix:
        argv += ["--url-prefix", url_prefix]
    if token_file:
        argv += ["--token-file", token_file]
    if agent_host:
        argv += ["--agent-host", agent_host]
    if node_agent is not None:
        argv += ["--node-agent", json.dumps(node_agent)]
    # Without "-m <module>": the raylet's own command line carries this, and must not look
    # like a dashboard's to anything that finds processes by their command line.
    restart = {"argv": argv[2:], "host": host, "port": bound}
    try:
        wait = spawn("dashboard", [*argv, "--fd", str(sock.fileno())], (sock.fileno(),))
    finally:
        sock.close()  # the dashboard has its own copy

    def agent_address() -> str:
        return wait().split()[1]

    return DashboardStart(dashboard_url(host, bound, url_prefix), agent_address, restart)


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
    restarts it when it dies and stops it (``ember.raylet.child_supervisor``). Without a dashboard
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


def start_dashboard_for(node: Any) -> DashboardStart | None:
    """``LocalNode.start``'s call before the raylet: the dashboard on the head (unless
    disabled), or None."""
    options = node.dashboard
    if not node.head or options.include is False:
        return None
    return start_dashboard(
        node.spawn,
        session_dir=node.session_dir,
        gcs_address=_gcs_address_of(node),
        host=options.host,
        port=options.port,
        url_prefix=options.url_prefix,
        token_file=getattr(node, "token_file", "") or None,
        # A cluster's agents on other machines stream to the hub: it listens on the node
        # IP (with the cluster token, see server.py), like the node's other TCP listeners;
        # the embedded node's hub is a Unix socket named in advance, so its agent needs no
        # word from the dashboard to find it. The HTTP port keeps --dashboard-host.
        agent_host=node.node_ip if node.cluster else hub_socket_address(node.session_dir),
        # The head's agent runs in the dashboard's process: one interpreter less on the
        # node (~35 MB idle), and its messages reach the hub without a gRPC hop.
        node_agent=agent_argv_for(node, ""),
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
