"""``ember metrics``: Prometheus and Grafana for a cluster in one command, as Ray's ``ray
metrics launch-prometheus``.

- ``launch-prometheus`` runs the local ``prometheus`` binary on the head's service-discovery
  file, its config, data and log under ``<session>/metrics/prometheus/``; its pid (with its
  start time, so a reused pid is never taken for it) in ``prometheus.pid`` there.
- ``shutdown-prometheus`` stops exactly that process.
- ``export-configs -o DIR`` writes prometheus.yml, the Grafana dashboards and Grafana's
  provisioning files (``ember.dashboard.grafana``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.request

import click

SD_FILE = "prom_metrics_service_discovery.json"
INSTALL_HINT = (
    "install it (Debian/Ubuntu: apt-get install prometheus; elsewhere the release tarball "
    "from prometheus.io/download, with its prometheus binary on PATH)"
)
READY_TIMEOUT = 30.0
STOP_TIMEOUT = 15.0


def _head_session(address: str | None, temp_dir: str | None) -> str:
    """The session dir of this machine's head of the cluster: where its dashboard keeps the
    service-discovery file."""
    from ember.cluster_address import local_node_for

    node = local_node_for(address, temp_dir)
    if node is None:
        raise click.ClickException(
            "no running Ember node on this machine"
            + (f" under {temp_dir}" if temp_dir else "")
            + ": start one with `ember start --head`, or pass --temp-dir / --address."
        )
    if not node.get("head"):
        raise click.ClickException(
            "the service-discovery file is kept by the head's dashboard, and the head does not "
            "run on this machine: run this command on the head's machine, or give --sd-file."
        )
    return str(node["session_dir"])


def _sd_file(address: str | None, temp_dir: str | None, sd_file: str | None) -> str:
    if sd_file:
        return os.path.abspath(sd_file)
    return os.path.join(_head_session(address, temp_dir), SD_FILE)


def _token_file(sd_file: str) -> str | None:
    """The cluster token beside the service-discovery file (``<session>/cluster_token``),
    if the head has one: a dashboard reachable from other hosts asks scrapes for it."""
    from ember.cluster_token import TOKEN_FILE

    path = os.path.join(os.path.dirname(sd_file), TOKEN_FILE)
    return path if os.path.isfile(path) else None


def _check_sd_file(sd_file: str) -> None:
    if not os.path.exists(sd_file):
        click.echo(
            f"(ember) note: {sd_file} does not exist yet; the head's dashboard writes it "
            "(every 2 s) while it runs. Prometheus picks it up when it appears.",
            err=True,
        )


def _prom_dir(session: str) -> str:
    return os.path.join(session, "metrics", "prometheus")


def _read_pid(pid_file: str):
    """The Prometheus process the pid file names, if it still runs (same pid, same start
    time); else None."""
    import psutil

    try:
        with open(pid_file) as f:
            rec = json.load(f)
        proc = psutil.Process(int(rec["pid"]))
        if abs(proc.create_time() - float(rec["create_time"])) < 1.0:
            return proc, rec
    except (OSError, ValueError, KeyError, psutil.Error):
        pass
    return None, None


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


@click.group()
def metrics() -> None:
    """Prometheus and Grafana for the cluster's /metrics."""


def _where(fn):
    fn = click.option(
        "--temp-dir",
        default=None,
        help="Where the head's session is (default: EMBER_TMPDIR, or /tmp/ember-sessions).",
    )(fn)
    return click.option(
        "--address", default=None, help="The cluster's GCS address (default: the local head)."
    )(fn)


@metrics.command("launch-prometheus")
@_where
@click.option("--port", type=click.IntRange(1, 65535), default=9090, show_default=True)
@click.option("--host", default="127.0.0.1", show_default=True, help="Where Prometheus listens.")
@click.option("--ray-names", is_flag=True, help="Scrape Ray's metric names (/metrics?compat=ray).")
def launch_prometheus(
    address: str | None, temp_dir: str | None, port: int, host: str, ray_names: bool
) -> None:
    """Run a local Prometheus scraping every node of the cluster (the head's service-discovery
    file); its data, config and log go under <session>/metrics/prometheus/."""
    from ember.dashboard.grafana import prometheus_yml

    binary = shutil.which("prometheus")
    if binary is None:
        raise click.ClickException(f"the prometheus binary is not on PATH: {INSTALL_HINT}.")
    session = _head_session(address, temp_dir)
    pdir = _prom_dir(session)
    pid_file = os.path.join(pdir, "prometheus.pid")
    proc, rec = _read_pid(pid_file)
    if proc is not None:
        click.echo(f"Prometheus already runs for this session (pid {proc.pid}): {rec['url']}")
        return
    os.makedirs(os.path.join(pdir, "data"), exist_ok=True)
    config = os.path.join(pdir, "prometheus.yml")
    sd = os.path.join(session, SD_FILE)
    _check_sd_file(sd)
    with open(config, "w") as f:
        f.write(prometheus_yml(sd, ray_names, token_file=_token_file(sd)))
    listen = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    url = f"http://{listen}"
    argv = [
        binary,
        f"--config.file={config}",
        f"--storage.tsdb.path={os.path.join(pdir, 'data')}",
        f"--web.listen-address={listen}",
    ]
    log_path = os.path.join(pdir, "prometheus.log")
    with open(log_path, "ab") as log:  # the child keeps its own copy of the descriptor
        child = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    import psutil

    with open(pid_file, "w") as f:
        json.dump(
            {"pid": child.pid, "create_time": psutil.Process(child.pid).create_time(), "url": url},
            f,
        )
    deadline = time.monotonic() + READY_TIMEOUT
    while not _ready(url):
        if child.poll() is not None or time.monotonic() > deadline:
            if child.poll() is None:
                child.kill()
            child.wait(timeout=STOP_TIMEOUT)
            os.unlink(pid_file)
            with open(log_path, errors="replace") as f:
                tail = f.read()[-1500:]
            raise click.ClickException(
                f"Prometheus did not become ready at {url} (port taken? try --port); its log "
                f"{log_path} ends:\n{tail}"
            )
        time.sleep(0.2)
    click.echo(f"Prometheus is running at {url} (pid {child.pid}), scraping {session}/{SD_FILE}.")
    click.echo(f"  config {config}, log {log_path}")
    click.echo(
        "  stop it with: ember metrics shutdown-prometheus"
        + (f" --temp-dir {temp_dir}" if temp_dir else "")
    )


@metrics.command("shutdown-prometheus")
@_where
def shutdown_prometheus(address: str | None, temp_dir: str | None) -> None:
    """Stop the Prometheus that launch-prometheus started for this session."""
    import psutil

    pid_file = os.path.join(_prom_dir(_head_session(address, temp_dir)), "prometheus.pid")
    proc, _rec = _read_pid(pid_file)
    if proc is None:
        if os.path.exists(pid_file):
            os.unlink(pid_file)
        click.echo("No Prometheus of this session runs.")
        return
    proc.terminate()
    try:
        proc.wait(timeout=STOP_TIMEOUT)
    except psutil.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=STOP_TIMEOUT)
    os.unlink(pid_file)
    click.echo(f"Stopped Prometheus (pid {proc.pid}).")


@metrics.command("export-configs")
@_where
@click.option("-o", "--output", "out_dir", required=True, help="The directory to write to.")
@click.option("--ray-names", is_flag=True, help="Ray's metric names (/metrics?compat=ray).")
@click.option(
    "--sd-file",
    default=None,
    help="The service-discovery file Prometheus reads (default: the local head's, "
    f"<session>/{SD_FILE}).",
)
@click.option(
    "--prometheus-url",
    default="http://127.0.0.1:9090",
    show_default=True,
    help="Grafana's data source.",
)
def export_configs(
    address: str | None,
    temp_dir: str | None,
    out_dir: str,
    ray_names: bool,
    sd_file: str | None,
    prometheus_url: str,
) -> None:
    """Write prometheus.yml, Grafana dashboards (cluster, nodes, tasks and actors, object
    store, jobs) and Grafana provisioning files to a directory."""
    from ember.dashboard.grafana import export_configs as write

    sd = _sd_file(address, temp_dir, sd_file)
    _check_sd_file(sd)
    try:
        paths = write(out_dir, sd, ray_names, prometheus_url, _token_file(sd))
    except OSError as e:
        raise click.ClickException(f"cannot write to {out_dir}: {e}") from None
    for path in paths:
        click.echo(path)
    click.echo(
        f"Prometheus: prometheus --config.file={paths[0]}; Grafana: GF_PATHS_PROVISIONING="
        f"{os.path.join(os.path.abspath(out_dir), 'grafana', 'provisioning')}",
        err=True,
    )
