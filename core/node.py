"""Starting and stopping a node's processes (GCS on the head, raylet everywhere).

``ember.init()`` with no address starts a head node tied to the driver (its processes die with
it, even on SIGKILL); ``ember start`` starts the same processes as daemons.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from typing import Any

import psutil
from ember import config
from ember.ids import new_unique_id
from ember.session import create_session_dir, socket_path


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
        include_dashboard: bool | None = None,
        dashboard_host: str = "127.0.0.1",
        dashboard_port: int | None = None,
    ) -> None:
        self.object_store_memory = int(object_store_memory or default_object_store_memory())
        self.resources = build_resources(
            num_cpus, num_gpus, resources, memory, self.object_store_memory
        )
        self.temp_dir = temp_dir
        self.head = head
        self.tied_to = tied_to
        self.node_ip = node_ip
        cpus = int(self.resources.get("CPU", 0))
        self.prestart = min(cpus, config.prestart_worker_cap) if prestart is None else prestart
        self.node_id = new_unique_id()
        self.session_dir = ""
        self.gcs_address = gcs_address or ""
        self.raylet_address = ""
        self.arena_path = ""
        self.procs: dict[str, subprocess.Popen] = {}
        # The dashboard runs on the head unless include_dashboard=False; the agent on every node.
        self.dashboard = {
            "include": head and include_dashboard is not False,
            "host": dashboard_host,
            "port": dashboard_port,
        }
        self.dashboard_url = ""

    def info(self) -> dict[str, Any]:
        return {
            "node_id": self.node_id,
            "session_dir": self.session_dir,
            "raylet_address": self.raylet_address,
            "gcs_address": self.gcs_address,
            "arena_path": self.arena_path,
            "arena_capacity": self.object_store_memory,
            "node_ip": self.node_ip,
            "dashboard_url": self.dashboard_url,
        }

    def start(self) -> None:
        self.session_dir = create_session_dir(self.temp_dir)
        if self.head:
            self.gcs_address = "unix:" + socket_path(self.session_dir, "gcs")
        self.raylet_address = "unix:" + socket_path(self.session_dir, "raylet")
        self.arena_path = f"/dev/shm/ember-{os.getpid()}-{self.node_id.hex()[:12]}"
        parent = ["--parent-pid", str(self.tied_to)] if self.tied_to else []
        waits = []
        try:
            if self.head:
                waits.append(
                    self._spawn(
                        "gcs_server",
                        [
                            "-m",
                            "ember.gcs.server",
                            "--session-dir",
                            self.session_dir,
                            "--address",
                            self.gcs_address,
                            *parent,
                        ],
                    )
                )
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
                        self.gcs_address,
                        "--resources",
                        json.dumps(self.resources),
                        "--object-store-memory",
                        str(self.object_store_memory),
                        "--arena-path",
                        self.arena_path,
                        "--node-ip",
                        self.node_ip,
                        "--prestart",
                        str(self.prestart),
                        *(["--head"] if self.head else []),
                        *parent,
                    ],
                )
            )
            deadline = time.monotonic() + config.process_start_timeout
            for name, fd in waits:
                self._wait_ready(name, fd, deadline)
            from ember.dashboard.launch import start_node_agents_for

            self.dashboard_url = start_node_agents_for(self)
        except BaseException:
            self.stop()
            raise

    def _spawn(self, name: str, args: list[str]) -> tuple[str, int]:
        r, w = os.pipe()
        logs = os.path.join(self.session_dir, "logs")
        out = open(os.path.join(logs, f"{name}.out"), "ab")
        err = open(os.path.join(logs, f"{name}.err"), "ab")
        try:
            proc = subprocess.Popen(
                [sys.executable, *args, "--ready-fd", str(w)],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                pass_fds=(w,),
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

    def spawn_ready(self, name: str, args: list[str]) -> str:
        """Starts ``args`` (tied to the driver like the rest) and returns its ready line."""
        parent = ["--parent-pid", str(self.tied_to)] if self.tied_to else []
        _, fd = self._spawn(name, [*args, *parent])
        return self._wait_ready(name, fd, time.monotonic() + config.process_start_timeout)

    def _wait_ready(self, name: str, fd: int, deadline: float) -> str:
        proc = self.procs[name]
        buf = b""
        try:
            while b"\n" not in buf:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(
                        f"the {name} process did not start within "
                        f"{config.process_start_timeout:.0f} s; see "
                        f"{self.session_dir}/logs/{name}.err"
                    )
                ready, _, _ = select.select([fd], [], [], min(left, 0.5))
                if ready:
                    chunk = os.read(fd, 4096)
                    if not chunk:
                        break
                    buf += chunk
                elif proc.poll() is not None:
                    break
        finally:
            os.close(fd)
        if b"\n" not in buf:
            tail = _tail(os.path.join(self.session_dir, "logs", f"{name}.err"))
            raise RuntimeError(
                f"the {name} process exited during start-up (code {proc.poll()}).\n{tail}"
            )
        return buf.decode().strip()

    def stop(self, timeout: float = 5.0) -> None:
        """Stops the raylet (which stops its workers), then the GCS; by force if they linger."""
        for name in ("agent", "dashboard", "raylet", "gcs_server"):
            proc = self.procs.get(name)
            if proc is None or proc.poll() is not None:
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
        if self.arena_path and os.path.exists(self.arena_path):
            try:
                os.unlink(self.arena_path)
            except OSError:
                pass


def _tail(path: str, n: int = 20) -> str:
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return ""
