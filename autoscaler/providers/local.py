"""``provider: {type: local, head_ip, worker_ips}`` with ``auth: {ssh_user, ssh_private_key}``:
a fixed list of hosts the user can SSH to (Ray's local provider). A worker node is made by
starting ``ember start --address HEAD --block`` on a free host over SSH, detached from the
SSH session; it is ended by stopping exactly the processes under that node's own directory
on the host. The host's IP is the node's id.

Which host runs which node, with its tags, is a JSON table on the head (``state_path``), so
a restarted autoscaler neither starts a second node on a busy host nor forgets one.

Other provider fields (all optional): ``gcs_address`` (the head's HOST:PORT, default
``head_ip:gcs_port``, port 6379), ``ember_command`` (``ember`` on the hosts' PATH),
``node_temp_dir`` (``/tmp/ember-nodes`` on the hosts), ``ssh_port`` (22), ``known_hosts``,
``state_path``. The cluster token reaches a host on the SSH session's standard input and
lives only in the node process's environment, never on a command line or in a file.
"""

from __future__ import annotations

import logging
import re
import shlex
import time
from collections.abc import Mapping
from typing import Any

from ember.autoscaler.command_runner import CommandError, CommandRunner, command_runner_for
from ember.autoscaler.host_setup import RemoteError, set_up_worker_host
from ember.autoscaler.node_provider import NODE_KIND_HEAD, TAG_NODE_KIND, StartsEmberNodes
from ember.autoscaler.providers.node_table import NodeTable
from ember.autoscaler.providers.start_args import (
    ember_command,
    ember_start_argv,
    gcs_address_of,
    join_token,
)

READY_TIMEOUT_S = 90  # ember start on the host: registered with the head, or given up
STOP_TIMEOUT_S = 30  # the node's --block process ends its processes on SIGTERM
SSH_SLACK_S = 30  # on top of the remote side's own deadline: connecting, a slow host
HOST_BACKOFF_S = 30.0  # a host that failed is tried last until then
# What ``ember start --block`` prints once its node registered (cli/start.py, ``_block``).
READY_MARK = "--block: staying in the foreground"

log = logging.getLogger("ember.autoscaler")


def start_script(node_dir: str, argv: list[str]) -> str:
    """The remote shell: start the node detached (its own session, output to a log), wait
    until it registered or died, print its pid. Every value is quoted. For a worker node
    here, and for the head ``ember up`` starts on ``head_ip`` (remote_head.py)."""
    d = shlex.quote(node_dir)
    return f"""
d={d}
mkdir -p "$d" && chmod 700 "$d" || exit 1
if [ -f "$d/node.pid" ] && kill -0 "$(cat "$d/node.pid")" 2>/dev/null; then
  echo "a node already runs in $d (pid $(cat "$d/node.pid")): stop it, or restore the table" >&2
  exit 3
fi
setsid nohup {shlex.join(argv)} > "$d/node.log" 2>&1 < /dev/null &
pid=$!
echo "$pid" > "$d/node.pid"
end=$(( $(date +%s) + {READY_TIMEOUT_S} ))
while [ "$(date +%s)" -lt "$end" ]; do
  if grep -qF -- {shlex.quote(READY_MARK)} "$d/node.log"; then echo "$pid"; exit 0; fi
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "ember start exited:" >&2; tail -c 2000 "$d/node.log" >&2; exit 1
  fi
  sleep 0.5
done
echo "ember start did not register in {READY_TIMEOUT_S} s:" >&2
tail -c 2000 "$d/node.log" >&2; kill "$pid"; exit 1
"""


def stop_script(node_dir: str, ember: list[str]) -> str:
    """The remote shell: SIGTERM the node's --block process (it stops its node), then sweep
    whatever still runs under the node's directory. A pid file whose process is not this
    node's (a reboot reused the pid) is never signalled."""
    d = shlex.quote(node_dir)
    stop = shlex.join([*ember, "stop", "--force", "--temp-dir", node_dir])
    return f"""
d={d}
if [ -f "$d/node.pid" ]; then
  pid=$(cat "$d/node.pid")
  if tr '\\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$d"; then
    kill -TERM "$pid" 2>/dev/null
    end=$(( $(date +%s) + {STOP_TIMEOUT_S} ))
    while kill -0 "$pid" 2>/dev/null && [ "$(date +%s)" -lt "$end" ]; do sleep 0.2; done
  fi
fi
if [ -d "$d" ]; then {stop} > /dev/null 2>&1; fi
rm -f "$d/node.pid"
"""


def node_dir_for(provider_config: Mapping[str, Any], cluster_name: str, ip: str) -> str:
    """The directory of the cluster's node on host ``ip`` (its ``--temp-dir``; the head's too,
    where ``ember up`` starts it). Per cluster and host: two clusters (or two test hosts
    sharing a disk) never mix. Short (8 characters of the name): Unix sockets live under it."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", cluster_name)
    return f"{provider_config.get('node_temp_dir', '/tmp/ember-nodes')}/{safe[:8]}-{ip}"


class LocalNodeProvider(StartsEmberNodes):
    def __init__(self, provider_config: Mapping[str, Any], cluster_name: str) -> None:
        super().__init__(provider_config, cluster_name)
        cfg = self.provider_config
        self.head_ip = str(cfg.get("head_ip") or "")
        self.worker_ips = [str(ip) for ip in cfg.get("worker_ips") or []]
        if not self.head_ip or "worker_ips" not in cfg:
            raise ValueError("provider (local) needs head_ip and worker_ips")
        if len(set(self.worker_ips)) != len(self.worker_ips) or self.head_ip in self.worker_ips:
            raise ValueError("provider (local): each host once, and the head not a worker too")
        self._auth = cfg.get("auth") or {}  # make_provider puts the config's auth here
        self.gcs_address = gcs_address_of(cfg)
        self.ember = ember_command(cfg)
        self.node_temp_dir = str(cfg.get("node_temp_dir", "/tmp/ember-nodes"))
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", cluster_name)
        self._safe_name = safe
        state = cfg.get("state_path") or f"~/.ember/clusters/{safe}/local_nodes.json"
        self.table = NodeTable(str(state))
        for ip in [self.head_ip, *self.worker_ips]:
            self.runner(ip)  # a bad host name or key file fails here, before any launch
        self._failed_at: dict[str, float] = {}  # host -> when it last failed to start a node
        # file_mounts, initialization_commands, worker_setup_commands (make_provider puts the
        # config's here): run on a host before each node starts there, as Ray's updater does.
        self.setup = cfg.get("worker_setup") or {}

    def runner(self, ip: str) -> CommandRunner:
        """The command runner for one of the cluster's hosts, as the launcher makes it."""
        return command_runner_for({"provider": self.provider_config, "auth": self._auth}, ip)

    def node_dir(self, ip: str) -> str:
        return node_dir_for(self.provider_config, self.cluster_name, ip)

    def non_terminated_nodes(self, tag_filters: Mapping[str, str]) -> list[str]:
        return [
            ip
            for ip, node in self.table.read().items()
            if all(node["tags"].get(k) == v for k, v in tag_filters.items())
        ]

    def node_tags(self, node_id: str) -> dict[str, str]:
        return dict(self.table.read()[node_id]["tags"])

    def set_node_tags(self, node_id: str, tags: Mapping[str, str]) -> None:
        with self.table.change() as nodes:
            nodes[node_id]["tags"].update(tags)

    def internal_ip(self, node_id: str) -> str:
        return node_id

    def external_ip(self, node_id: str) -> str | None:
        return node_id

    def create_node_with_resources_and_labels(
        self,
        node_config: Mapping[str, Any],
        tags: Mapping[str, str],
        count: int,
        resources: Mapping[str, float],
        labels: Mapping[str, str],
    ) -> dict[str, dict[str, Any]]:
        if tags.get(TAG_NODE_KIND) == NODE_KIND_HEAD:
            # The head is a fixed host: the launcher runs its start commands there.
            with self.table.change() as nodes:
                nodes[self.head_ip] = {"tags": dict(tags), "node_dir": None}
            return {self.head_ip: {"tags": dict(tags), "ip": self.head_ip}}
        token = join_token(self.provider_config, self.gcs_address)
        made: dict[str, dict[str, Any]] = {}
        errors: list[str] = []
        for _ in range(count):
            ip = self._start_on_a_free_host(tags, resources, labels, token, errors)
            if ip is None:
                break
            made[ip] = {"tags": dict(tags), "ip": ip}
        if len(made) < count:
            why = "; ".join(errors) or (
                f"every one of the {len(self.worker_ips)} worker_ips already runs a node of "
                f"cluster {self.cluster_name!r}: add hosts to provider.worker_ips or lower "
                "max_workers"
                if self.worker_ips
                else "provider.worker_ips is empty: add the hosts worker nodes may run on"
            )
            raise RuntimeError(f"local provider: started {len(made)} of {count} node(s): {why}")
        return made

    def _free_hosts(self) -> list[str]:
        busy = set(self.table.read())
        free = [ip for ip in self.worker_ips if ip not in busy]
        # Hosts that failed lately go last: a host that is down does not block the others.
        return sorted(free, key=lambda ip: self._failed_at.get(ip, 0.0))

    def _start_on_a_free_host(
        self,
        tags: Mapping[str, str],
        resources: Mapping[str, float],
        labels: Mapping[str, str],
        token: str,
        errors: list[str],
    ) -> str | None:
        now = time.monotonic()
        for ip in self._free_hosts():
            if now - self._failed_at.get(ip, -HOST_BACKOFF_S) < HOST_BACKOFF_S and errors:
                continue  # failed lately, and this launch already failed elsewhere
            node_dir = self.node_dir(ip)
            argv = ember_start_argv(
                self.ember, self.gcs_address, node_dir, ip, tags, resources, labels, node_ip=ip
            )
            # Recorded before it starts: a crash mid-start still leaves a node to stop.
            with self.table.change() as nodes:
                nodes[ip] = {"tags": dict(tags), "node_dir": node_dir}
            try:
                runner = self.runner(ip)
                set_up_worker_host(
                    runner, self.setup, lambda line, ip=ip: log.info("%s:%s", ip, line)
                )
                out = runner.run(
                    start_script(node_dir, argv),
                    timeout=READY_TIMEOUT_S + SSH_SLACK_S,
                    secret_env={"EMBER_TOKEN": token},
                    what="starting a worker node (ember start --block)",
                )
            except (CommandError, RemoteError) as e:
                self._failed_at[ip] = time.monotonic()
                errors.append(str(e))
                log.warning("local provider: %s", e)
                if not getattr(e, "unreachable", False):
                    self._stop(ip, node_dir, check=False)  # whatever half-started there
                with self.table.change() as nodes:
                    nodes.pop(ip, None)
                continue
            self._failed_at.pop(ip, None)
            pid = int(out.stdout.split()[-1])
            with self.table.change() as nodes:
                nodes[ip]["pid"] = pid
            log.info("local provider: node started on %s (pid %d)", ip, pid)
            return ip
        return None

    def _stop(self, ip: str, node_dir: str, check: bool = True) -> None:
        try:
            self.runner(ip).run(
                stop_script(node_dir, self.ember),
                timeout=STOP_TIMEOUT_S + SSH_SLACK_S,
                what=f"stopping the node in {node_dir}",
            )
        except CommandError:
            if check:
                raise

    def terminate_node(self, node_id: str) -> None:
        node = self.table.read().get(node_id)
        if node is None:
            return
        if node.get("node_dir"):
            try:
                self._stop(node_id, node["node_dir"])
            except CommandError as e:
                # Kept in the table: the next call asks again.
                raise RuntimeError(f"local provider: cannot stop the node on {e}") from None
        with self.table.change() as nodes:
            nodes.pop(node_id, None)
