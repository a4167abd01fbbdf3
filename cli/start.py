"""``ember start``: a head node (``--head``) or a worker node (``--address``) as daemons.

The processes run in their own session (a terminal's Ctrl-C spares them) and outlive this
command; ``ember stop`` ends them. With ``--block`` this command stays in the foreground and
stops the node on SIGTERM or Ctrl-C, or when one of its processes dies.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import sys
import threading

import click


def _parse_resources(raw: str | None) -> dict[str, float] | None:
    if not raw:
        return None
    try:
        value = json.loads(raw)
    except ValueError as e:
        raise click.BadParameter(f"not JSON ({e}); e.g. --resources '{{\"GPU_A\": 2}}'") from None
    if not isinstance(value, dict) or not all(
        isinstance(v, int | float) and v >= 0 for v in value.values()
    ):
        raise click.BadParameter(
            "must be a JSON object of non-negative numbers, e.g. '{\"accelerator\": 1}'"
        )
    return {str(k): float(v) for k, v in value.items()}


@click.command()
@click.option("--head", is_flag=True, help="Start the head node (GCS) of a new cluster.")
@click.option("--address", default=None, help="Join the cluster whose head is at HOST:PORT.")
@click.option("--port", type=int, default=6379, show_default=True, help="The head's GCS port.")
@click.option("--node-ip-address", default=None, help="This node's IP (default: detected).")
@click.option("--num-cpus", type=float, default=None)
@click.option("--num-gpus", type=float, default=None)
@click.option("--resources", default=None, help="Custom resources as JSON, e.g. '{\"A\": 2}'.")
@click.option(
    "--labels",
    default=None,
    help="This node's labels, KEY=VALUE,... or JSON; tasks, actors and jobs select nodes by them.",
)
@click.option("--memory", type=float, default=None, help="Bytes of memory for tasks.")
@click.option("--object-store-memory", type=int, default=None, help="Bytes of shared memory.")
@click.option(
    "--object-spilling-directory",
    default=None,
    help="Where objects spill to disk when the store is full (default: the session directory).",
)
@click.option(
    "--object-spilling-max-bytes",
    type=click.IntRange(min=0),
    default=None,
    help="Cap on the bytes of spilled objects on this node (0: no cap, the default).",
)
@click.option("--temp-dir", default=None, help="Root of the session directories.")
@click.option("--token", default=None, envvar="EMBER_TOKEN", help="The cluster token (joining).")
@click.option("--block", is_flag=True, help="Stay in the foreground; stop on SIGTERM/Ctrl-C.")
@click.option("--include-dashboard", type=bool, default=None, help="Start the dashboard.")
@click.option("--dashboard-host", default="127.0.0.1", show_default=True)
@click.option(
    "--dashboard-port",
    type=click.IntRange(0, 65535),
    default=8265,
    show_default=True,
    help="The dashboard's HTTP port; the next free one when taken.",
)
@click.option(
    "--dashboard-url-prefix",
    default="",
    help="Serve the dashboard under this path too (behind a reverse proxy), e.g. /ember.",
)
@click.option(
    "--storage",
    default="",
    help="Where the head's GCS keeps the cluster's tables so they survive its restart: "
    "redis://HOST:PORT (pip install 'ember[redis]'), sqlite:PATH, or memory: "
    "(default: a SQLite file in the session directory).",
)
@click.option(
    "--autoscaling-config",
    default=None,
    type=click.Path(exists=True, dir_okay=False),
    help="A cluster.yaml: the head runs the autoscaler on it, restarted if it dies "
    "(ember up passes this).",
)
def start(
    head: bool,
    address: str | None,
    port: int,
    node_ip_address: str | None,
    num_cpus: float | None,
    num_gpus: float | None,
    resources: str | None,
    labels: str | None,
    memory: float | None,
    object_store_memory: int | None,
    object_spilling_directory: str | None,
    object_spilling_max_bytes: int | None,
    temp_dir: str | None,
    token: str | None,
    block: bool,
    include_dashboard: bool | None,
    dashboard_host: str,
    dashboard_port: int,
    dashboard_url_prefix: str,
    storage: str,
    autoscaling_config: str | None,
) -> None:
    """Start Ember's processes on this machine."""
    from ember.cluster_address import normalize_address, token_for
    from ember.cluster_token import normalize
    from ember.labels import parse_labels
    from ember.listen_rules import is_wildcard
    from ember.node import DashboardOptions, LocalNode, node_ip_for

    if head == bool(address):
        raise click.UsageError("pass exactly one of --head or --address=HOST:PORT")
    if node_ip_address in ("0.0.0.0", "::", ""):
        raise click.BadParameter(
            "listeners bind this node's own IP, never every interface: give the address other "
            "nodes reach this one at (e.g. 10.0.0.5), or leave it out to detect it",
            param_hint="--node-ip-address",
        )
    if storage:
        from ember.gcs.storage import check_url

        if not head:
            raise click.UsageError("--storage is the head's (the GCS runs there): pass --head")
        try:
            check_url(storage)
        except ValueError as e:
            raise click.BadParameter(str(e), param_hint="--storage") from None
    if autoscaling_config:
        from ember.autoscaler.config import ConfigError, load_config

        if not head:
            raise click.UsageError("--autoscaling-config is the head's: pass --head")
        try:
            load_config(autoscaling_config)  # a bad file fails here, before anything starts
        except ConfigError as e:
            raise click.BadParameter(str(e), param_hint="--autoscaling-config") from None
    custom = _parse_resources(resources)
    try:
        node_labels = parse_labels(labels) if labels else {}
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--labels") from None
    if is_wildcard(dashboard_host):
        # Allowed (the dashboard then demands the cluster token), but never silently.
        shown = dashboard_host or '""'
        click.echo(
            f"Dashboard: --dashboard-host {shown} listens on every interface; "
            "requests need the cluster token",
            err=True,
        )
    dashboard = DashboardOptions(
        include_dashboard, dashboard_host, dashboard_port, dashboard_url_prefix
    )
    common = {
        "num_cpus": num_cpus,
        "num_gpus": num_gpus,
        "resources": custom,
        "labels": node_labels,
        "memory": memory,
        "object_store_memory": object_store_memory,
        "object_spilling_directory": object_spilling_directory,
        "object_spilling_max_bytes": object_spilling_max_bytes,
        "temp_dir": temp_dir,
        "cluster": True,
        "dashboard": dashboard,
    }
    if head:
        node_ip = node_ip_address or node_ip_for()
        secret = _user_token(token, normalize)
        node = LocalNode(
            head=True,
            node_ip=node_ip,
            gcs_port=port,
            token=secret,
            gcs_storage=storage,
            autoscaling_config=autoscaling_config,
            **common,
        )
    else:
        try:
            gcs = normalize_address(address)
        except ValueError as e:
            raise click.UsageError(str(e)) from None
        host = gcs[4:].rpartition(":")[0]
        secret = _user_token(token, normalize) or token_for(gcs, temp_dir)
        if secret is None:
            _fail(
                f"joining {address} needs the cluster token: pass --token or set EMBER_TOKEN "
                "(the head prints it; it is in the cluster_token file of its session directory)"
            )
        _check_head(gcs, secret, address)
        node_ip = node_ip_address or node_ip_for(host)
        node = LocalNode(head=False, gcs_address=gcs, node_ip=node_ip, token=secret, **common)
    try:
        node.start()
    except (OSError, RuntimeError, TimeoutError, ValueError) as e:
        _fail(f"could not start the node: {e}")
    _print_started(node, head, temp_dir)
    _cleanup_hint(temp_dir)
    if block:
        _block(node)


def _user_token(token: str | None, normalize) -> bytes | None:
    try:
        return normalize(token)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--token") from None


def _check_head(gcs: str, token: bytes, address: str) -> None:
    """Refuse early, with the reason, when the head is unreachable or refuses the token."""
    from ember.protocol import connection as conn_mod

    async def ping() -> None:
        conn = await conn_mod.connect(gcs, name="gcs", token=token, timeout=5.0)
        try:
            await conn.call("ping", None, timeout=5.0)
        finally:
            conn.close()

    loop = conn_mod.new_event_loop()
    try:
        loop.run_until_complete(ping())
    except conn_mod.AuthenticationError as e:
        _fail(str(e))
    except (OSError, TimeoutError) as e:
        _fail(f"could not reach the head at {address}: {e or type(e).__name__}")
    finally:
        loop.close()


def _print_started(node, head: bool, temp_dir: str | None) -> None:
    """What started, and the next steps: each command names this cluster (its address, the
    temp dir it was started under), so it acts on it and not on another of the machine."""
    from urllib.parse import urlsplit

    from ember.listen_rules import is_wildcard, rule_for

    addr = node.gcs_address[len("tcp:") :]
    here = ["--temp-dir", os.path.abspath(temp_dir)] if temp_dir else []
    click.echo("--------------------")
    click.echo("Ember runtime started.")
    click.echo("--------------------")
    click.echo(f"Node {node.node_id.hex()} at {node.node_ip}; session {node.session_dir}")
    stop = shlex.join(["ember", "stop", *here])
    if not head:
        click.echo(f"Joined the cluster at {addr}. To stop this machine's nodes of it: {stop}")
        return
    click.echo("")
    click.echo("Next steps")
    click.echo("  To add another node to this Ember cluster, run")
    click.echo(f"    ember start --address='{addr}' --token={node.token.decode()}")
    click.echo("  (on this machine the token is found automatically)")
    click.echo("")
    click.echo("  To connect to this cluster from Python on a node of it:")
    click.echo("    import ember")
    # 'auto' finds the default temp dir's cluster; under another, the address names it.
    click.echo(f"    ember.init(address='{addr if temp_dir else 'auto'}')")
    click.echo("")
    if node.dashboard_url:
        click.echo(f"  {_dashboard_line(node.dashboard_url, node.dashboard.port)}")
        if rule_for(node.dashboard.host, cluster=False).token_required:
            # Off loopback it wants the token: this link signs a browser in (a cookie).
            # A wildcard's URL shows loopback; other machines reach it at the node's IP.
            url = urlsplit(node.dashboard_url)
            if is_wildcard(node.dashboard.host):
                host = f"[{node.node_ip}]" if ":" in node.node_ip else node.node_ip
                url = url._replace(netloc=f"{host}:{url.port}")
            link = f"{url.geturl().rstrip('/')}/?token={node.token.decode()}"
            click.echo(f"  From another machine's browser: {link}")
    click.echo(
        f"  To see the cluster:   {shlex.join(['ember', 'status', '--address', addr, *here])}"
    )
    where = f"under {here[1]}" if here else "of the default temp dir"
    click.echo(f"  To stop the Ember processes {where} on this machine:   {stop}")


def _cleanup_hint(temp_dir: str | None) -> None:
    from ember.cli.cleanup import start_hint

    hint = start_hint(temp_dir)
    if hint:
        click.echo(hint, err=True)


def _dashboard_line(url: str, asked: int) -> str:
    """The dashboard's URL, saying so when the asked port was taken and it moved."""
    from urllib.parse import urlsplit

    port = urlsplit(url).port
    if asked and port is not None and port != asked:
        return f"Dashboard: port {asked} is taken; using {port}: {url}"
    return f"Dashboard: {url}"


def _block(node) -> None:
    """Foreground mode: stop the node on SIGTERM/Ctrl-C or when one of its processes dies."""
    stop = threading.Event()
    reason = {"why": ""}

    def on_signal(signum: int, _frame) -> None:
        reason["why"] = signal.Signals(signum).name
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    click.echo("--block: staying in the foreground; Ctrl-C or SIGTERM stops the node.")
    while not stop.wait(0.5):
        dead = node.dead_processes()
        if dead:
            reason["why"] = f"{', '.join(dead)} exited"
            break
    click.echo(f"Stopping the node ({reason['why']}).")
    node.stop()
    sys.exit(0 if stop.is_set() else 1)


def _fail(message: str) -> None:
    from ember.cli.errors import fail

    fail(message)
