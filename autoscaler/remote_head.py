"""``ember up``/``down`` for the ``local`` provider: the head on ``provider.head_ip``, started
and stopped over SSH through the command runner, as Ray's launcher does it.

``ember up`` on the head host, in Ray's order: wait for SSH; ``file_mounts`` copied
(``rsync``); ``initialization_commands``; the head's setup commands (``setup_commands`` then
``head_setup_commands``); then the head started. The config the head's autoscaler reads
(Ray's ``~/ray_bootstrap_config.yaml``) and the SSH key it reaches the worker hosts with
(Ray's ``~/ray_bootstrap_key.pem``) are copied into the head's directory on the host,
``node_dir_for(head_ip)`` (``<node_temp_dir>/<cluster>-<head_ip>``), which is also the head's
``--temp-dir``. The copy's ``auth.ssh_private_key`` names the copied key.

The head is started as a worker node is (``providers/local.py``'s ``start_script``):
``ember start --head --block --autoscaling-config ...`` detached from the SSH session, with
the cluster token (made here, kept in the cluster's local directory, mode 0600) on the SSH
session's standard input, never on a command line. A config that gives its own
``head_start_ember_commands`` (or Ray's ``head_start_ray_commands``) has them run as written
instead, with ``EMBER_TOKEN``, ``EMBER_TEMP_DIR``, ``EMBER_AUTOSCALING_CONFIG`` and
``EMBER_HEAD_IP`` in their environment; they must start the head under ``$EMBER_TEMP_DIR``.

``ember down`` stops the head first (its autoscaler with it, so nothing is launched
meanwhile), then, over SSH from this machine, the cluster's node directory on every one of
``worker_ips`` (a host with none is a no-op), then removes the head's directory and the
provider's table of nodes.
"""

from __future__ import annotations

import json
import os
import shlex
import socket
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import yaml
from ember.autoscaler.command_runner import (
    CommandError,
    CommandRunner,
    PortForward,
    command_runner_for,
    tmux_socket,
)
from ember.autoscaler.host_setup import (
    CONNECT_TIMEOUT_S,
    COPY_TIMEOUT_S,
    SHORT_TIMEOUT_S,
    RemoteError,
    expand_home,
    home_of,
    run_commands,
    sync_file_mounts,
)
from ember.autoscaler.host_setup import run_on as _run
from ember.autoscaler.providers.local import (
    READY_TIMEOUT_S,
    SSH_SLACK_S,
    STOP_TIMEOUT_S,
    node_dir_for,
    start_script,
    stop_script,
)
from ember.autoscaler.providers.start_args import ember_command, gcs_address_of, resource_args


def _runner(config: Mapping[str, Any], ip: str) -> CommandRunner:
    try:
        return command_runner_for(config, ip)
    except ValueError as e:  # a bad host name or a missing key file: nothing started
        raise RemoteError(str(e)) from None


def head_runner(config: Mapping[str, Any]) -> CommandRunner:
    return _runner(config, str(config["provider"]["head_ip"]))


def head_dir(config: Mapping[str, Any]) -> str:
    provider = config["provider"]
    return node_dir_for(provider, config["cluster_name"], str(provider["head_ip"]))


def _given_start_commands(raw: Mapping[str, Any]) -> list[str] | None:
    """The head start commands the user's file gives (Ember's or Ray's name), else None: the
    defaults are replaced by ``ember up``'s own start."""
    for name in ("head_start_ember_commands", "head_start_ray_commands"):
        if name in raw:
            return list(raw[name])
    return None


def bootstrap_config(raw: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The config the head's autoscaler reads: the user's, with the key it logs in to the
    worker hosts with at its copy on the head, and the file mounts' sources at their copies
    there."""
    out = json.loads(json.dumps(raw))
    if out.get("file_mounts"):  # worker hosts get them from the head's copies
        out["file_mounts"] = {remote: remote for remote in out["file_mounts"]}
    if (out.get("auth") or {}).get("ssh_private_key"):
        out["auth"]["ssh_private_key"] = f"{where}/ssh_key"
    return out


def _read_node(runner: CommandRunner, where: str) -> dict[str, Any] | None:
    out = _run(
        runner,
        f"cat -- {shlex.quote(where)}/session_latest/node.json 2>/dev/null || true",
        SHORT_TIMEOUT_S,
    )
    try:
        return json.loads(out) if out.strip() else None
    except ValueError:
        return None


def head_alive(config: Mapping[str, Any]) -> bool:
    """Whether the head ``ember up`` started still runs on its host (its --block process,
    or for user-given start commands, its raylet)."""
    runner = head_runner(config)
    d = shlex.quote(head_dir(config))
    probe = (
        f'p=$(cat {d}/node.pid 2>/dev/null) && kill -0 "$p" 2>/dev/null && echo yes && exit; '
        f"r=$(sed -n 's/.*\"raylet\": *\\([0-9]*\\).*/\\1/p' {d}/session_latest/node.json "
        '2>/dev/null); [ -n "$r" ] && kill -0 "$r" 2>/dev/null && echo yes; true'
    )
    return _run(runner, probe, SHORT_TIMEOUT_S).strip() == "yes"


def push_config(
    config: Mapping[str, Any], raw: Mapping[str, Any], local_copy: str
) -> tuple[CommandRunner, str]:
    """The bootstrap config (and key) on the head, in its directory; (runner, its path)."""
    runner = head_runner(config)
    where = head_dir(config)
    _run(
        runner,
        f"mkdir -p -- {shlex.quote(where)} && chmod 700 -- {shlex.quote(where)}",
        CONNECT_TIMEOUT_S,
        what="making the head's directory",
    )
    with open(local_copy + ".tmp", "w") as f:
        yaml.safe_dump(bootstrap_config(raw, where), f, sort_keys=True)
    os.replace(local_copy + ".tmp", local_copy)
    try:
        runner.put(local_copy, f"{where}/cluster.yaml", timeout=COPY_TIMEOUT_S)
        key = (config.get("auth") or {}).get("ssh_private_key")
        if key:
            runner.put(os.path.expanduser(key), f"{where}/ssh_key", timeout=COPY_TIMEOUT_S)
            _run(runner, ["chmod", "600", f"{where}/ssh_key"], SHORT_TIMEOUT_S)
    except CommandError as e:
        raise RemoteError(str(e)) from None
    return runner, f"{where}/cluster.yaml"


def start_head(
    config: Mapping[str, Any],
    raw: Mapping[str, Any],
    local_copy: str,
    token: str,
    echo: Callable[[str], None],
) -> dict[str, Any]:
    """Setup, then the head started on ``head_ip``; the record ``launcher.json`` keeps."""
    provider = config["provider"]
    ip = str(provider["head_ip"])
    runner = _runner(config, ip)
    echo(f"Reaching the head host {ip} over SSH")
    home = home_of(runner)
    sync_file_mounts(config, runner, home, echo)
    run_commands(runner, "initialization_commands", config["initialization_commands"], echo)
    run_commands(runner, "head_setup_commands", config["head_setup_commands"], echo)
    runner, cluster_yaml = push_config(config, raw, local_copy)
    where = head_dir(config)
    gcs = gcs_address_of(provider)
    given = _given_start_commands(raw)
    if given is not None:
        env = {
            "EMBER_TEMP_DIR": where,
            "EMBER_AUTOSCALING_CONFIG": cluster_yaml,
            "EMBER_HEAD_IP": ip,
        }
        for i, cmd in enumerate(given):
            echo(f"  head_start_ember_commands[{i}]: {cmd}")
            _run(
                runner,
                cmd,
                READY_TIMEOUT_S + SSH_SLACK_S,
                env=env,
                secret_env={"EMBER_TOKEN": token},
                what=f"head_start_ember_commands[{i}]",
            )
    else:
        head_type = config["available_node_types"][config["head_node_type"]]
        argv = [*ember_command(provider), "start", "--head", "--block", "--temp-dir", where]
        argv += ["--port", gcs.rpartition(":")[2], "--node-ip-address", ip]
        argv += ["--autoscaling-config", cluster_yaml]
        argv += resource_args(head_type.get("resources") or {}, head_type.get("labels") or {})
        echo(f"  starting the head: {shlex.join(argv)}")
        _run(
            runner,
            start_script(where, argv),
            READY_TIMEOUT_S + SSH_SLACK_S,
            secret_env={"EMBER_TOKEN": token},
            what="starting the head (ember start --head)",
        )
    node = _read_node(runner, where)
    if node is None:
        raise RemoteError(
            f"{ip}: no head found under {where} after its start commands: they must start "
            "it with --temp-dir=$EMBER_TEMP_DIR (ember up finds it there)"
        )
    return {
        "provider": "local",
        "head_ip": ip,
        "gcs_address": str(node["gcs_address"]).removeprefix("tcp:"),
        "head_dir": where,
        "session_dir": node["session_dir"],
        "dashboard_port": _port((node.get("dashboard") or {}).get("url") or ""),
        "home": home,
    }


def _port(url: str) -> int | None:
    from urllib.parse import urlsplit

    return urlsplit(url).port if url else None


def stop_cluster(config: Mapping[str, Any], echo: Callable[[str], None]) -> list[str]:
    """Stops the head, then the cluster's node on every worker host; the errors (hosts that
    could not be reached), after trying every host."""
    provider = config["provider"]
    name = config["cluster_name"]
    ember = ember_command(provider)
    errors: list[str] = []
    head_ip = str(provider["head_ip"])
    head = _runner(config, head_ip)
    where = head_dir(config)
    tmux = shlex.join(["tmux", "-L", tmux_socket(name), "kill-server"])
    try:
        echo(f"Stopping the head on {head_ip}")
        # exec --tmux's sessions first: what they run would otherwise outlive the cluster.
        head.run(
            f"{tmux} >/dev/null 2>&1; {stop_script(where, ember)}",
            timeout=STOP_TIMEOUT_S + SSH_SLACK_S,
            what=f"stopping the head in {where}",
        )
    except CommandError as e:
        errors.append(str(e))
    for ip in provider.get("worker_ips") or []:
        try:
            _runner(config, str(ip)).run(
                stop_script(node_dir_for(provider, name, str(ip)), ember),
                timeout=STOP_TIMEOUT_S + SSH_SLACK_S,
                what=f"stopping the cluster's node on {ip}",
            )
        except CommandError as e:
            errors.append(str(e))
    if not errors:
        # Nothing of the cluster runs: its directory (key, config) and node table go.
        safe = "".join(c if c.isalnum() or c in "_.-" else "_" for c in name)
        table = str(provider.get("state_path") or f"~/.ember/clusters/{safe}/local_nodes.json")
        try:
            home = home_of(head)
            _run(
                head,
                [
                    "rm",
                    "-rf",
                    "--",
                    where,
                    expand_home(table, home),
                    expand_home(table, home) + ".lock",
                ],
                SHORT_TIMEOUT_S,
            )
        except RemoteError as e:
            errors.append(str(e))
    return errors


class RemoteHead:
    """A running head on another host, as ``launcher.json`` recorded it: what ``exec``,
    ``submit``, ``attach``, ``rsync-up``/``down``, ``monitor``, ``dashboard`` and
    ``get-worker-ips`` use. Commands run in the head's directory with ``EMBER_ADDRESS``
    set and the directory of ``provider.ember_command`` first on PATH (so ``python`` and
    ``ember`` are the cluster's); ``ember.init()`` there finds the token in the head's
    session, so it never travels for them."""

    python = "python"

    def __init__(self, config: Mapping[str, Any], record: Mapping[str, Any], token: str) -> None:
        self.config = config
        self.cluster_name = str(config["cluster_name"])
        self.record = dict(record)
        self.ip = str(record["head_ip"])
        self.runner = _runner(config, self.ip)
        self.workdir = str(record["head_dir"])
        self.token = token

    @property
    def address(self) -> str:
        return str(self.record["gcs_address"])

    def _line(self, cmd: Sequence[str] | str) -> str:
        line = cmd if isinstance(cmd, str) else shlex.join(cmd)
        first = ember_command(self.config["provider"])[0]
        path = (
            f'PATH={shlex.quote(os.path.dirname(first))}:"$PATH"; export PATH; '
            if (first.startswith("/"))
            else ""
        )
        return f"{path}cd {shlex.quote(self.workdir)} || exit 1; {line}"

    def run(self, cmd: Sequence[str] | str, tty: bool = False) -> int:
        try:
            return self.runner.run_attached(
                self._line(cmd), env={"EMBER_ADDRESS": self.address}, tty=tty
            )
        except CommandError as e:
            raise RemoteError(str(e)) from None

    def shell(self) -> int:
        return self.run('exec "${SHELL:-/bin/sh}" -l', tty=True)

    def put(self, source: str, target: str) -> None:
        try:
            self.runner.put(
                source, expand_home(target, self.record.get("home", "~")), timeout=COPY_TIMEOUT_S
            )
        except CommandError as e:
            raise RemoteError(str(e)) from None

    def get(self, source: str, target: str) -> None:
        try:
            self.runner.get(
                expand_home(source, self.record.get("home", "~")), target, timeout=COPY_TIMEOUT_S
            )
        except CommandError as e:
            raise RemoteError(str(e)) from None

    def gcs_call(self, op: str, body: Any = None) -> Any:
        """One call to the head's GCS: directly when this machine reaches it, else through an
        SSH port-forward to it (the GCS listens on the head's own IP)."""
        from ember.autoscaler.monitor import GcsLink

        host, _, port = self.address.rpartition(":")
        forward = None
        try:
            socket.create_connection((host, int(port)), timeout=3).close()
            address = self.address
        except OSError:
            try:
                forward = self.runner.port_forward(int(port), remote_host=host)
            except CommandError as e:
                raise RemoteError(str(e)) from None
            address = f"127.0.0.1:{forward.local_port}"
        link = GcsLink(f"tcp:{address}", self.token.encode())
        try:
            return link.call(op, body)
        finally:
            link.close()
            if forward is not None:
                forward.close()

    def forward(self, port: int) -> PortForward:
        """This machine's ``port`` relayed to the head's loopback ``port`` (exec -p)."""
        try:
            return self.runner.port_forward(port, port)
        except CommandError as e:
            raise RemoteError(str(e)) from None

    def open_dashboard(self) -> tuple[str, PortForward | None]:
        """The head's dashboard (on its loopback) forwarded here: (its URL here, the forward
        to close when done), or ("", None) when the head runs none."""
        port = self.record.get("dashboard_port")
        if not port:
            return "", None
        try:
            forward = self.runner.port_forward(int(port))
        except CommandError as e:
            raise RemoteError(str(e)) from None
        return f"http://127.0.0.1:{forward.local_port}", forward

    def tail_monitor(self, lines: int, follow: bool) -> int:
        log = f"{self.record['session_dir']}/logs/monitor.err"
        return self.run(["tail", "-n", str(lines), *(["-F"] if follow else []), log])
