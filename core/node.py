"""Starting and stopping a node's processes (GCS on the head, raylet everywhere).

``ember.init()`` with no address starts a head node tied to the driver (its processes die with
it, even on SIGKILL); ``ember start`` starts the same processes as daemons. A node of a
cluster (``cluster=True``) also listens on TCP at its node IP, with the cluster token, and
describes itself in ``<session_dir>/node.json`` for drivers and tools of the same machine.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psutil
from ember import config
from ember.ids import new_unique_id
from ember.labels import check_labels
from ember.log_format import NODE_ENV
from ember.process_util import wait_ready_line
from ember.session import (
    create_session_dir,
    register_head,
    socket_path,
    unlist_live_session,
    unregister_head,
    write_node_info,
)
from ember.session_processes import sweep_orphan_arenas

logger = logging.getLogger(__name__)


def default_object_store_memory() -> int:
    total = psutil.virtual_memory().total
    size = int(total * config.object_store_memory_fraction)
    try:
        shm = os.statvfs("/dev/shm")
        size = min(size, int(shm.f_bavail * shm.f_frsize * 0.95))
    except OSError:
        pass
    return max(min(size, config.object_store_memory_cap), 64 * 1024 * 1024)


def build_resources(
    num_cpus: float | None,
    num_gpus: float | None,
    resources: dict[str, float] | None,
    memory: float | None,
    object_store_memory: int,
) -> dict[str, float]:
    for name in ("CPU", "GPU"):
        if resources and name in resources:
            raise ValueError(
                f"Pass num_{name.lower()}s instead of resources={{'{name}': ...}} to ember.init()."
            )
    total: dict[str, float] = {}
    total["CPU"] = float(num_cpus if num_cpus is not None else (os.cpu_count() or 1))
    gpus = num_gpus if num_gpus is not None else _detect_gpus()
    if gpus:
        total["GPU"] = float(gpus)
    if memory is None:
        avail = psutil.virtual_memory().available
        memory = max(avail * 0.7 - object_store_memory, 0)
    total["memory"] = float(int(memory))
    total["object_store_memory"] = float(object_store_memory)
    for name, amount in (resources or {}).items():
        if not isinstance(amount, int | float) or amount < 0:
            raise ValueError(f"resource {name!r} must be a non-negative number, got {amount!r}")
        total[name] = float(amount)
    return total


def _detect_gpus() -> int:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip()])
    try:
        return len([d for d in os.listdir("/dev") if d.startswith("nvidia") and d[6:].isdigit()])
    except OSError:
        return 0


# The autoscaler's process (``ember start --head --autoscaling-config``), by module name.
AUTOSCALER_MODULE = "ember.autoscaler.monitor"


@dataclass
class DashboardOptions:
    """``--include-dashboard``, ``--dashboard-host``, ``--dashboard-port`` and
    ``--dashboard-url-prefix`` of ``ember start``."""

    include: bool | None = None  # None: the default (on where the dashboard is installed)
    host: str = "127.0.0.1"
    port: int = 8265
    url_prefix: str = ""  # served under this path too, for a reverse proxy (Ray #35269)


def node_ip_for(target_host: str | None = None) -> str:
    """The address other nodes reach this one at: the source address of the route to the head
    (or, on the head, to the outside world); loopback when there is no route."""
    probe = target_host or "192.0.2.1"  # TEST-NET: never sent, only routed
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.connect((probe, 9))
        return s.getsockname()[0]
    except OSError:
        return "127.0.0.1"
    finally:
        s.close()


class LocalNode:
    """The processes of one node; ``tied_to`` makes them die with that pid (the driver)."""

    def __init__(
        self,
        *,
        num_cpus: float | None = None,
        num_gpus: float | None = None,
        resources: dict[str, float] | None = None,
        memory: float | None = None,
        object_store_memory: int | None = None,
        temp_dir: str | None = None,
        head: bool = True,
        gcs_address: str | None = None,
        tied_to: int | None = None,
        prestart: int | None = None,
        node_ip: str = "127.0.0.1",
        cluster: bool = False,
        gcs_port: int = 0,
        token: bytes | None = None,
        dashboard: DashboardOptions | None = None,
        env: dict[str, str] | None = None,
        include_dashboard: bool | None = None,
        dashboard_host: str = "127.0.0.1",
        dashboard_port: int | None = None,
        dashboard_url_prefix: str = "",
        labels: dict[str, str] | None = None,
        object_spilling_directory: str | None = None,
        object_spilling_max_bytes: int | None = None,
        gcs_storage: str = "",
        autoscaling_config: str | None = None,
    ) -> None:
        """``gcs_storage``: where the head's GCS keeps its tables (``ember.gcs.storage``:
        ``sqlite:PATH``, ``redis://HOST:PORT``, ``memory:``; default a SQLite file in the
        session directory)."""
        self.gcs_storage = gcs_storage or config.gcs_storage
        # The head runs the autoscaler's monitor on this cluster.yaml, kept running by its
        # raylet like the GCS and the dashboard. The module is named, never imported: the
        # runtime does not depend on the autoscaler library.
        self.autoscaling_config = (
            os.path.abspath(autoscaling_config) if autoscaling_config and head else None
        )
        self.labels = check_labels(labels or {})
        if object_spilling_max_bytes is not None and object_spilling_max_bytes < 0:
            raise ValueError(
                f"object_spilling_max_bytes must be 0 (no cap) or more, got "
                f"{object_spilling_max_bytes}"
            )
        # Where the raylet spills objects: a directory of its own under this root (default:
        # the session directory), removed with the node. The environment is read now, not at
        # import: the raylet reads its other spilling settings from the same environment.
        self.spill_root = (
            object_spilling_directory
            or (env or {}).get("EMBER_OBJECT_SPILLING_DIRECTORY")
            or os.environ.get("EMBER_OBJECT_SPILLING_DIRECTORY")
            or config.object_spilling_directory
        )
        self.spill_max_bytes = object_spilling_max_bytes
        self.spill_dir = ""
        self.object_store_memory = int(object_store_memory or default_object_store_memory())
        self.resources = build_resources(
            num_cpus, num_gpus, resources, memory, self.object_store_memory
        )
        self.temp_dir = temp_dir
        self.head = head
        self.tied_to = tied_to
        self.node_ip = node_ip
        cpus = int(self.resources.get("CPU", 0))
        # A cluster node speaks TCP with a token; the embedded node only Unix sockets.
        self.cluster = cluster or not head
        cap = config.prestart_worker_cap if self.cluster else config.local_prestart_worker_cap
        self.prestart = min(cpus, cap) if prestart is None else prestart
        self.node_id = new_unique_id()
        self.session_dir = ""
        self.gcs_address = gcs_address or ""
        self.raylet_address = ""
        self.arena_path = ""
        self.procs: dict[str, subprocess.Popen] = {}
        self._stopping = False  # stop() or kill() began: a child's exit is expected
        self.gcs_port = gcs_port
        self.token = token
        self.token_file = ""
        self.gcs_unix_address = ""
        if dashboard is None:  # ember.init()'s spellings
            dashboard = DashboardOptions(
                include=include_dashboard,
                host=dashboard_host,
                port=dashboard_port if dashboard_port is not None else DashboardOptions.port,
                url_prefix=dashboard_url_prefix,
            )
        # The dashboard runs on the head unless include=False; the agent runs on every node.
        self.dashboard = dashboard
        self.dashboard_url = ""
        self.env = env  # extra environment for this node's processes (tests: timeouts)
        if not head and not gcs_address:
            raise ValueError("a worker node needs the head's address (gcs_address)")

    def info(self) -> dict[str, Any]:
        return {
            "node_id": self.node_id,
            "session_dir": self.session_dir,
            "raylet_address": self.raylet_address,
            "gcs_address": self.gcs_address,
            "arena_path": self.arena_path,
            "arena_capacity": self.object_store_memory,
            "spill_dir": self.spill_dir,
            "node_ip": self.node_ip,
            "token_file": self.token_file,
            "gcs_unix_address": self.gcs_unix_address,
            "dashboard_url": self.dashboard_url,
        }

    def start(self) -> None:
        self.session_dir = create_session_dir(self.temp_dir)
        made_token = False
        if self.cluster:
            from ember.cluster_token import new_token, write_token

            if self.token is None:
                if not self.head:
                    raise ValueError("a worker node needs the cluster token")
                self.token, made_token = new_token(), True
            self.token_file = write_token(self.session_dir, self.token)
        local_gcs = ""
        if self.head:
            local_gcs = "unix:" + socket_path(self.session_dir, "gcs")
            self.gcs_unix_address = local_gcs
            self.gcs_address = local_gcs
        self.raylet_address = "unix:" + socket_path(self.session_dir, "raylet")
        self.arena_path = f"/dev/shm/ember-{os.getpid()}-{self.node_id.hex()[:12]}"
        swept = sweep_orphan_arenas()
        if swept:
            logger.info("removed %d arena file(s) that killed nodes left: %s", len(swept), swept)
        self.spill_dir = self._spill_dir()
        parent = ["--parent-pid", str(self.tied_to)] if self.tied_to else []
        token_args = ["--token-file", self.token_file] if self.cluster else []
        try:
            if self.head:
                gcs_args = [
                    "-m",
                    "ember.gcs.server",
                    "--session-dir",
                    self.session_dir,
                    "--address",
                    local_gcs,
                    "--node-death-timeout",
                    (self.env or {}).get(
                        "EMBER_NODE_DEATH_TIMEOUT", str(config.node_death_timeout)
                    ),
                    *parent,
                ]
                if self.gcs_storage:
                    gcs_args += ["--storage", self.gcs_storage]
                if self.cluster:
                    gcs_args += ["--tcp", f"tcp:{self.node_ip}:{self.gcs_port}", *token_args]
                    # A head started again on a used storage keeps the token stored there
                    # (unless the user gave one), so the nodes that joined it reconnect.
                    gcs_args += ["--keep-stored-token"] if made_token else []
                # The GCS first: its ready line says the TCP port it really bound.
                name, fd = self._spawn("gcs_server", gcs_args)
                ready = self._wait_ready(name, fd, time.monotonic() + config.process_start_timeout)
                if self.cluster:
                    from ember.cluster_token import read_token

                    self.token = read_token(self.token_file)  # the stored one, if it was kept
                    self.gcs_address = ready
                    # A GCS started again binds the port this one bound.
                    gcs_args[gcs_args.index("--tcp") + 1] = ready
                # The head's raylet starts the GCS again if it dies (gcs_supervisor).
                gcs_restart = {"argv": gcs_args[2:], "pid": self.procs["gcs_server"].pid}
            # The dashboard before the raylet: the head's agent runs in the dashboard's
            # process, and the raylet starts an agent only where there is no dashboard.
            from ember.launch import agent_argv_for, start_dashboard_for

            dashboard = start_dashboard_for(self)
            dashboard_ready = None
            dashboard_args: list[str] = []
            if dashboard is not None:
                self.dashboard_url, dashboard_ready = dashboard.url, dashboard.wait
                # The raylet starts the dashboard again if it dies (dashboard_supervisor).
                restart = {**dashboard.restart, "pid": self.procs["dashboard"].pid}
                dashboard_args = ["--dashboard", json.dumps(restart)]
            waits = []
            waits.append(
                self._spawn(
                    "raylet",
                    [
                        "-m",
                        "ember.raylet.raylet",
                        "--node-id",
                        self.node_id.hex(),
                        "--session-dir",
                        self.session_dir,
                        "--address",
                        self.raylet_address,
                        "--gcs-address",
                        local_gcs or self.gcs_address,
                        "--resources",
                        json.dumps(self.resources),
                        "--labels",
                        json.dumps(self.labels),
                        "--object-store-memory",
                        str(self.object_store_memory),
                        "--arena-path",
                        self.arena_path,
                        "--spill-dir",
                        self.spill_dir,
                        *(
                            ["--spill-max-bytes", str(self.spill_max_bytes)]
                            if self.spill_max_bytes is not None
                            else []
                        ),
                        "--node-ip",
                        self.node_ip,
                        "--prestart",
                        str(self.prestart),
                        *(["--head"] if self.head else []),
                        *(["--gcs", json.dumps(gcs_restart)] if self.head else []),
                        *self._monitor_args(),
                        *token_args,
                        *(["--cluster-address", self.gcs_address] if self.cluster else []),
                        # No dashboard here: the raylet runs the agent (else it is in
                        # the dashboard's process).
                        *(
                            dashboard_args
                            if dashboard_ready is not None
                            else ["--agent", json.dumps(agent_argv_for(self, ""))]
                        ),
                        *parent,
                    ],
                )
            )
            deadline = time.monotonic() + config.process_start_timeout
            for name, fd in waits:
                self._wait_ready(name, fd, deadline)
            if dashboard_ready is not None:
                if self.cluster:
                    dashboard_ready()  # ember start reports a dashboard that did not start
                else:
                    # The embedded node's hub is a Unix socket named in advance, so init()
                    # need not wait for the dashboard's imports (see _await_dashboard).
                    self._await_dashboard(dashboard_ready)
            # node.json, so a second driver of this machine joins with the address init()
            # reported (an embedded node's too: it lives as long as its first driver).
            self.write_info()
            if self.cluster and self.head:
                register_head(self.gcs_address, self.session_dir)
        except BaseException:
            self.stop()
            raise
        from ember.process_util import release_startup_memory

        # The driver's share of start-up's freed heap. No full collection: a user's driver
        # may hold a large heap already, and the trim alone gives back ~1 MB here.
        release_startup_memory(collect=False)

    def _monitor_args(self) -> list[str]:
        """The raylet's ``--supervise`` of the autoscaler's monitor, when there is one."""
        if not self.autoscaling_config:
            return []
        argv = [AUTOSCALER_MODULE, "--config", self.autoscaling_config]
        argv += ["--address", self.gcs_address]
        return ["--supervise", json.dumps({"name": "monitor", "argv": argv})]

    def _await_dashboard(self, ready: Callable[[], str]) -> None:
        """An embedded node's dashboard finishes starting while the driver goes on: its port
        is bound (requests wait in its backlog) and its agent knows where to stream. Asked
        for explicitly (``include_dashboard=True``), init() waits and fails as Ray's does;
        by default a dashboard that fails to start is a warning, and tasks run without it."""
        if self.dashboard.include is True:
            ready()
            return

        def watch() -> None:
            try:
                ready()
            except Exception as e:
                if not self._stopping:
                    logger.warning("the dashboard did not start (tasks run without it): %s", e)

        threading.Thread(target=watch, name="ember-dashboard-start", daemon=True).start()

    def write_info(self) -> None:
        info = {
            "node_id": self.node_id.hex(),
            "session_dir": self.session_dir,
            "temp_dir": os.path.dirname(self.session_dir),
            "raylet_address": self.raylet_address,
            "gcs_address": self.gcs_address,
            "gcs_unix_address": self.gcs_unix_address,
            "arena_path": self.arena_path,
            "arena_capacity": self.object_store_memory,
            "spill_dir": self.spill_dir,
            "node_ip": self.node_ip,
            "token_file": self.token_file,
            "head": self.head,
            "embedded": not self.cluster,  # ember.init()'s node, tied to its driver
            "resources": self.resources,
            "pids": {name: p.pid for name, p in self.procs.items()},
            "dashboard": {
                "include": self.dashboard.include,
                "host": self.dashboard.host,
                "port": self.dashboard.port,
                "url_prefix": self.dashboard.url_prefix,
                "url": self.dashboard_url,
            },
        }
        write_node_info(self.session_dir, info)

    def dead_processes(self) -> list[str]:
        """The node's processes that exited; not the dashboard or the GCS, which the raylet
        starts again when they die (dashboard_supervisor, gcs_supervisor): the raylet
        stops when it gives up on them."""
        exited = [n for n, p in self.procs.items() if p.poll() is not None]  # reaps them too
        return [n for n in exited if n not in ("dashboard", "gcs_server")]

    def _spawn(self, name: str, args: list[str], fds: tuple[int, ...] = ()) -> tuple[str, int]:
        r, w = os.pipe()
        logs = os.path.join(self.session_dir, "logs")
        out = open(os.path.join(logs, f"{name}.out"), "ab")
        err = open(os.path.join(logs, f"{name}.err"), "ab")
        try:
            proc = subprocess.Popen(
                [sys.executable, *args, "--ready-fd", str(w)],
                # The node's id for every process's log lines (log_format: the JSON records'
                # node_id); the raylet's workers and the processes it restarts inherit it.
                env={**os.environ, **(self.env or {}), NODE_ENV: self.node_id.hex()},
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                pass_fds=(w, *fds),
                close_fds=True,
                # Daemons (ember start) get their own session so a terminal's Ctrl-C spares them.
                start_new_session=self.tied_to is None,
            )
        finally:
            os.close(w)
            out.close()
            err.close()
        self.procs[name] = proc
        return name, r

    def spawn(self, name: str, args: list[str], fds: tuple[int, ...] = ()) -> Callable[[], str]:
        """Starts ``args`` (tied to the driver like the rest), handing it ``fds``; returns a
        function that waits for its ready line (once; later calls return the same line)."""
        parent = ["--parent-pid", str(self.tied_to)] if self.tied_to else []
        _, fd = self._spawn(name, [*args, *parent], fds)
        deadline = time.monotonic() + config.process_start_timeout
        outcome: list[Any] = []  # [the line] or [the exception]
        lock = threading.Lock()

        def wait() -> str:
            with lock:
                if not outcome:
                    try:
                        outcome.append(self._wait_ready(name, fd, deadline))
                    except Exception as e:
                        outcome.append(e)
                if isinstance(outcome[0], Exception):
                    raise outcome[0]
                return outcome[0]

        return wait

    def _wait_ready(self, name: str, fd: int, deadline: float) -> str:
        return wait_ready_line(
            name, self.procs[name], fd, deadline, os.path.join(self.session_dir, "logs")
        )

    def kill(self) -> None:
        """Ends the node abruptly (SIGKILL), as a crashed machine would: no goodbyes."""
        self._stopping = True
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
        for proc in self.procs.values():
            try:
                proc.wait(5.0)
            except subprocess.TimeoutExpired:
                pass
        self._remove_leftovers()

    def stop(self, timeout: float = 5.0) -> None:
        """Stops the raylet (which stops its workers), then the GCS; by force if they linger."""
        self._stopping = True
        # The raylet first: it stops the agent, whose open stream would otherwise hold the
        # dashboard's gRPC server for its 0.5 s grace.
        for name in ("raylet", "dashboard", "gcs_server"):
            proc = self.procs.get(name)
            if proc is None or proc.poll() is not None:
                if proc is not None:
                    proc.wait()
                continue
            try:
                proc.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                continue
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(2.0)
        self._remove_leftovers()

    def _spill_dir(self) -> str:
        from ember.object_store.spill import spill_dir_for

        root = os.path.abspath(self.spill_root or self.session_dir)  # node.json and stop
        try:
            os.makedirs(root, exist_ok=True)
        except OSError as e:
            raise ValueError(
                f"the object spilling directory {root} cannot be created ({e}): pass a "
                f"writable directory (--object-spilling-directory, EMBER_OBJECT_SPILLING_DIRECTORY)"
            ) from None
        if not os.access(root, os.W_OK | os.X_OK):
            raise ValueError(
                f"the object spilling directory {root} is not writable: pass one you can "
                f"write (--object-spilling-directory, EMBER_OBJECT_SPILLING_DIRECTORY)"
            )
        return spill_dir_for(root, self.node_id.hex())

    def _remove_leftovers(self) -> None:
        """What outlives the processes: the head's note in the heads dir, the arena file, the
        spill files (a raylet killed by force could not remove them)."""
        if self.spill_dir:
            shutil.rmtree(self.spill_dir, ignore_errors=True)
        if self.head and self.gcs_address:
            unregister_head(self.gcs_address, self.session_dir)
        if self.session_dir:
            unlist_live_session(self.session_dir)
        if self.arena_path and os.path.exists(self.arena_path):
            try:
                os.unlink(self.arena_path)
            except OSError:
                pass
