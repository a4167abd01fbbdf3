"""What the agent measures with psutil: the node (every 2 s) and each Ember process on it.

Rates (disk, network) are differences between two samples. ``Process`` objects are cached per
pid so ``cpu_percent`` measures the interval since the last sample, as top does.
"""

from __future__ import annotations

import os
import time
from typing import Any

import psutil

_SKIP_FS = {"tmpfs", "devtmpfs", "overlay", "squashfs", "proc", "sysfs", "cgroup", "cgroup2"}


class NodeSampler:
    def __init__(self) -> None:
        self._last_t = time.monotonic()
        self._last_disk = _disk_io()
        self._last_net = _net_io()
        psutil.cpu_percent(percpu=True)  # primes the interval
        self._gpus = _nvml()

    def sample(self) -> dict[str, Any]:
        now = time.monotonic()
        dt = max(now - self._last_t, 1e-3)
        per_core = psutil.cpu_percent(percpu=True)
        vm = psutil.virtual_memory()
        disk, net = _disk_io(), _net_io()
        out: dict[str, Any] = {
            "cpu_percent": sum(per_core) / max(len(per_core), 1),
            "cpu_per_core": per_core,
            "num_cpus": len(per_core),
            "load_avg": list(os.getloadavg()),
            "mem_total_bytes": vm.total,
            "mem_used_bytes": vm.total - vm.available,
            "mem_available_bytes": vm.available,
            "mem_shared_bytes": getattr(vm, "shared", 0),
            "disks": _disks(),
            "disk_read_bytes_per_s": max(disk[0] - self._last_disk[0], 0) / dt,
            "disk_write_bytes_per_s": max(disk[1] - self._last_disk[1], 0) / dt,
            "net_sent_bytes_per_s": max(net[0] - self._last_net[0], 0) / dt,
            "net_recv_bytes_per_s": max(net[1] - self._last_net[1], 0) / dt,
            # Totals since boot too: the Machines page shows them, Prometheus takes counters.
            "net_sent_bytes": net[0],
            "net_recv_bytes": net[1],
            "boot_time": psutil.boot_time(),
            "uptime_s": time.time() - psutil.boot_time(),
        }
        self._last_t, self._last_disk, self._last_net = now, disk, net
        gpus = self._gpus() if self._gpus is not None else None
        if gpus is not None:
            out["gpus"] = gpus
        return out


def _disk_io() -> tuple[int, int]:
    try:
        c = psutil.disk_io_counters()
        return (c.read_bytes, c.write_bytes) if c else (0, 0)
    except (OSError, RuntimeError):
        return (0, 0)


def _net_io() -> tuple[int, int]:
    try:
        c = psutil.net_io_counters()
        return (c.bytes_sent, c.bytes_recv) if c else (0, 0)
    except OSError:
        return (0, 0)


def _disks() -> list[dict[str, Any]]:
    out = []
    for part in psutil.disk_partitions(all=False):
        if part.fstype in _SKIP_FS:
            continue
        try:
            u = psutil.disk_usage(part.mountpoint)
        except OSError:
            continue
        out.append(
            {
                "mount": part.mountpoint,
                "total_bytes": u.total,
                "used_bytes": u.used,
                "percent": u.percent,
            }
        )
    return out


def _nvml() -> Any:
    """GPU utilisation and memory through NVML (``pynvml``, from the ``gpu`` extra:
    ``pip install 'ember[gpu]'``) when the library and a GPU exist; else None, and the sample
    has no ``gpus`` key (absent, not zero)."""
    try:
        import pynvml  # type: ignore[import-not-found]

        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
    except Exception:
        return None
    if not count:
        return None

    def read() -> list[dict[str, Any]] | None:
        gpus = []
        try:
            for i in range(count):
                h = pynvml.nvmlDeviceGetHandleByIndex(i)
                util = pynvml.nvmlDeviceGetUtilizationRates(h)
                mem = pynvml.nvmlDeviceGetMemoryInfo(h)
                name = pynvml.nvmlDeviceGetName(h)
                gpus.append(
                    {
                        "index": i,
                        "name": name.decode() if isinstance(name, bytes) else str(name),
                        "utilization_percent": util.gpu,
                        "memory_used_bytes": mem.used,
                        "memory_total_bytes": mem.total,
                    }
                )
        except Exception:
            # A GPU fallen off the bus, a driver reloaded: this sample has no GPU figures
            # rather than none at all (the rest of the sample still goes out).
            return None
        return gpus

    return read


class ProcessSampler:
    """CPU %, RSS, USS, open files and uptime of the given pids (cached ``Process`` objects)."""

    def __init__(self) -> None:
        self._procs: dict[int, psutil.Process] = {}

    def sample(self, pids: list[int], full: bool = True) -> dict[int, dict[str, Any]]:
        out = {}
        alive = set()
        for pid in pids:
            proc = self._procs.get(pid)
            try:
                if proc is None:
                    proc = self._procs[pid] = psutil.Process(pid)
                    proc.cpu_percent()  # primes; the first real reading comes next sample
                with proc.oneshot():
                    started = proc.create_time()
                    row: dict[str, Any] = {
                        "cpu_percent": proc.cpu_percent(),
                        "rss_bytes": proc.memory_info().rss,
                        "start_time": started,
                        "uptime_s": max(time.time() - started, 0.0),
                    }
                    if full:
                        row["uss_bytes"] = _uss(proc)
                        row["num_open_files"] = proc.num_fds()
                out[pid] = row
                alive.add(pid)
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                self._procs.pop(pid, None)
        for pid in list(self._procs):
            if pid not in alive and pid not in pids:
                del self._procs[pid]
        return out


def _uss(proc: psutil.Process) -> int | None:
    try:
        return proc.memory_full_info().uss
    except (psutil.AccessDenied, OSError):
        return None
