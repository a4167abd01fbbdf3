"""The chaos suite's cluster and its bookkeeping: a real two-node cluster on loopback, the
driver processes it runs, and the three measures of a leak (store bytes, in memory or
spilled, above the idle baseline; arena files in /dev/shm and spill directories; processes
left).

Every process the suite starts, node or driver, carries ``EMBER_CHAOS_RUN=<this run>`` and
``EMBER_CHAOS_TAG=<node or "driver">`` in its environment (workers inherit their raylet's),
so a process left behind is found by what it is, whoever its parent is now, and processes
of other users of the machine are never counted or touched.
"""

from __future__ import annotations

import contextlib
import glob
import os
import queue
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import psutil
from ember.cluster_utils import Cluster
from ember.node import LocalNode
from ember.tools.ports import free_port

T = TypeVar("T")
MIB = 1024 * 1024
STORE = 192 * MIB  # each node's object store
RUN_VAR, TAG_VAR = "EMBER_CHAOS_RUN", "EMBER_CHAOS_TAG"
# Fast membership, as the cluster tests use: a killed raylet's node is declared dead in ~2 s.
FAST_FAILURE_ENV = {"EMBER_HEARTBEAT_INTERVAL": "0.2", "EMBER_NODE_DEATH_TIMEOUT": "2"}
LOW_USAGE, HIGH_USAGE = "0.10", "0.99"


class FaultError(Exception):
    """A fault was not survived; the message says what was seen."""


def poll(check: Callable[[], T], timeout: float, what: str, interval: float = 0.1) -> T:
    """``check()`` until it returns something truthy; FaultError at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise FaultError(f"no {what} within {timeout:g} s")
        time.sleep(interval)


@dataclass
class Injected:
    """What one injection did: its target, connections refused (hostile peers), bytes seen
    leaked before the end the caller measures (a live driver after ``shutdown()``)."""

    what: str
    refused: int | None = None
    leaked: int = 0


@dataclass
class Row:
    """One fault kind's line of the table."""

    fault: str
    injected: int = 0
    survived: int = 0
    bytes_leaked: int = 0
    shm_left: int = 0
    procs_left: int = 0
    refused: int | None = None  # only the hostile-peer cases refuse connections
    seconds: float = 0.0
    failures: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        clean = self.bytes_leaked == 0 and self.shm_left == 0 and self.procs_left == 0
        return self.survived == self.injected and clean


class Driver:
    """A driver process of ``ember.tools.chaos.driver``; its stdout is read line by line on a
    thread, so every wait for a word has a deadline."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.said: list[str] = []
        self.err: list[str] = []
        threading.Thread(target=self._read, args=(self.proc.stdout, True), daemon=True).start()
        threading.Thread(target=self._read, args=(self.proc.stderr, False), daemon=True).start()

    def _read(self, stream: Any, out: bool) -> None:
        for line in stream:
            if out:
                self.lines.put(line.strip())
            else:
                self.err.append(line.rstrip())
                del self.err[:-40]  # its last lines are what explains a failure
        if out:
            self.lines.put(None)

    def expect(self, word: str, timeout: float) -> list[str]:
        """The words of the next line starting with ``word``; FaultError if the driver says
        ERROR, exits, or says nothing of the kind before the deadline."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise FaultError(f"the driver did not say {word} within {timeout:g} s") from None
            if line is None:
                self.lines.put(None)  # stays at the end for later calls
                code = self.proc.wait(10)
                raise FaultError(f"the driver exited ({code}) before {word}: {self.tail()}")
            self.said.append(line)
            if line.startswith("ERROR"):
                raise FaultError(f"the driver failed: {line[6:]}")
            if line.split()[0] == word:
                return line.split()[1:]

    def tell(self, line: str = "go") -> None:
        with contextlib.suppress(OSError):
            self.proc.stdin.write(line + "\n")
            self.proc.stdin.flush()

    def close_stdin(self) -> None:
        with contextlib.suppress(OSError):
            self.proc.stdin.close()

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise FaultError(f"the driver did not exit within {timeout:g} s") from None

    def tail(self) -> str:
        return " | ".join(self.err[-6:])

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)


class Harness:
    def __init__(self, log: Callable[[str], None] = print) -> None:
        self.log = log
        self.run_id = uuid.uuid4().hex[:12]
        self.work_dir = tempfile.mkdtemp(prefix="ember-chaos-", dir="/tmp")
        self.usage_file = os.path.join(self.work_dir, "far-memory-usage")
        self.cluster: Cluster | None = None
        self.drivers: list[Driver] = []
        self.far_count = 0
        self.dead_tags: set[str] = set()
        self.baseline: dict[bytes, int] = {}

    # -- the cluster -----------------------------------------------------------------------
    def start(self) -> None:
        # The flood opens a few hundred sockets at once.
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 8192)), hard))
        with open(self.usage_file, "w") as f:
            f.write(LOW_USAGE)
        self.cluster = Cluster(
            initialize_head=True,
            head_node_args={
                "num_cpus": 2,
                "object_store_memory": STORE,
                "env": {TAG_VAR: "head"},
                # Not 8265 or the next free one: the dashboard is SIGKILLed and comes back
                # on its own port, which a cluster started meanwhile (the suite runs two
                # processes, and new clusters take 8265 or the next free port) can take.
                "dashboard_port": free_port(),
            },
            temp_root=os.path.join(self.work_dir, "cluster"),
            env={RUN_VAR: self.run_id, **FAST_FAILURE_ENV},
        )
        self.add_far()
        self.baseline = self.store_use()

    def add_far(self) -> LocalNode:
        """The worker node, whose memory monitor reads the suite's usage file (its test hook),
        so the hog case can raise its usage without filling the machine."""
        self.far_count += 1
        return self.cluster.add_node(
            num_cpus=2,
            object_store_memory=STORE,
            env={
                TAG_VAR: f"far{self.far_count}",
                "EMBER_MEMORY_MONITOR_USAGE_FILE": self.usage_file,
                "EMBER_MEMORY_USAGE_THRESHOLD": "0.9",
                "EMBER_MEMORY_MONITOR_REFRESH_MS": "250",
            },
        )

    @property
    def head(self) -> LocalNode:
        return self.cluster.head_node

    @property
    def far(self) -> LocalNode:
        return self.cluster.worker_nodes[0]

    def replace_far(self) -> None:
        """After its raylet was killed: the node's remains are stopped as ``Cluster`` stops a
        crashed machine's, and a new worker node joins, so the next fault has two nodes."""
        old = self.far
        self.dead_tags.add(f"far{self.far_count}")
        self.cluster.remove_node(old, allow_graceful=False)
        self.add_far()
        self.baseline = self.store_use()

    def live_tags(self) -> set[str]:
        return {"head", f"far{self.far_count}"}

    def store_use(self) -> dict[bytes, int]:
        """Bytes every live node's store holds, in memory or spilled to disk, from its
        raylet."""
        use = {}
        for n in self.cluster.list_all_nodes():
            store = self.cluster.raylet_call(n, "node_stats")["store"]
            use[n.node_id] = store["used_bytes"] + store.get("spilled_bytes", 0)
        return use

    # -- drivers ---------------------------------------------------------------------------
    def driver(self, mode: str, extra: str = "") -> Driver:
        argv = [sys.executable, "-m", "ember.tools.chaos.driver", mode, self.head.gcs_address]
        argv += [os.path.dirname(self.head.session_dir), self.far.node_id.hex()]
        if extra:
            argv.append(extra)
        env = {**os.environ, RUN_VAR: self.run_id, TAG_VAR: "driver"}
        env.pop("EMBER_ADDRESS", None)  # the suite's cluster, not the user's
        d = Driver(argv, env)
        self.drivers.append(d)
        return d

    def probe(self, timeout: float = 120.0) -> None:
        """The cluster still serves: tasks, an actor and large objects on both nodes."""
        d = self.driver("probe", self.head.node_id.hex())
        try:
            d.expect("OK", timeout)
            if d.wait(30) != 0:
                raise FaultError(f"the probe exited with {d.proc.returncode}: {d.tail()}")
        finally:
            d.kill()

    # -- leaks -----------------------------------------------------------------------------
    def settle(self, timeout: float = 30.0) -> int:
        """Bytes above the idle baseline still in the stores once every driver has ended
        (polled: frees reach the raylets asynchronously); 0 once they are back."""
        excess = 0

        def back() -> bool:
            nonlocal excess
            use = self.store_use()
            excess = sum(max(0, b - self.baseline.get(n, 0)) for n, b in use.items())
            return excess == 0

        with contextlib.suppress(FaultError):
            poll(back, timeout, "idle stores", interval=0.2)
        return excess

    def marked(self) -> list[tuple[psutil.Process, str]]:
        """This run's processes still alive (zombies have ended and are not counted)."""
        found = []
        for p in psutil.process_iter():
            try:
                if p.status() == psutil.STATUS_ZOMBIE:
                    continue
                env = p.environ()
            except (psutil.Error, OSError):
                continue
            if env.get(RUN_VAR) == self.run_id:
                found.append((p, env.get(TAG_VAR, "")))
        return found

    def stray_processes(self, timeout: float = 15.0) -> list[str]:
        """Processes of drivers that ended and of nodes that died, still alive at the
        deadline (a dead raylet's workers end on their parent-death signal, soon)."""
        strays: list[str] = []

        def none_left() -> bool:
            strays[:] = [
                f"{p.pid} ({tag}: {' '.join(p.cmdline())[:80]})"
                for p, tag in self._marked_safe()
                if tag == "driver" or tag in self.dead_tags
            ]
            return not strays

        with contextlib.suppress(FaultError):
            poll(none_left, timeout, "end of stray processes", interval=0.2)
        return strays

    def _marked_safe(self) -> list[tuple[psutil.Process, str]]:
        out = []
        for p, tag in self.marked():
            with contextlib.suppress(psutil.Error):
                p.cmdline()  # still there
                out.append((p, tag))
        return out

    def shm_files(self) -> list[str]:
        """Arena files of this process's nodes (``LocalNode`` names them by its pid) and
        their spill directories (objects spilled to disk)."""
        spill = []
        if self.cluster is not None:
            nodes = self.cluster.removed_nodes + self.cluster.list_all_nodes()
            spill = [n.spill_dir for n in nodes if n.spill_dir and os.path.exists(n.spill_dir)]
        return sorted(glob.glob(f"/dev/shm/ember-{os.getpid()}-*") + spill)

    def stray_shm(self) -> list[str]:
        nodes = self.cluster.list_all_nodes() if self.cluster else []
        live = {n.arena_path for n in nodes} | {n.spill_dir for n in nodes}
        return [f for f in self.shm_files() if f not in live]

    # -- the end ---------------------------------------------------------------------------
    def close(self) -> tuple[list[str], list[str]]:
        """Stops everything this run started, whatever state it is in; returns what was
        still there after the graceful stop (processes, then /dev/shm files), which it then
        removes by force. Safe to call twice."""
        for d in self.drivers:
            d.kill()
        self.drivers.clear()
        with open(self.usage_file, "w") as f:  # a hog's gate is moot once its node stops
            f.write(LOW_USAGE)
        if self.cluster is not None:
            with contextlib.suppress(Exception):
                self.cluster.shutdown()
            for node in self.cluster.removed_nodes + self.cluster.list_all_nodes():
                with contextlib.suppress(Exception):
                    node.kill()
        procs: list[str] = []

        def gone() -> bool:
            procs[:] = [f"{p.pid} ({tag})" for p, tag in self._marked_safe()]
            return not procs

        with contextlib.suppress(FaultError):
            poll(gone, 15.0, "end of the run's processes", interval=0.2)
        for p, _ in self._marked_safe():
            with contextlib.suppress(psutil.Error):
                p.send_signal(signal.SIGKILL)
        shm = self.shm_files()
        for path in shm:
            if os.path.isdir(path):
                shutil.rmtree(path, ignore_errors=True)
            with contextlib.suppress(OSError):
                os.unlink(path)
        shutil.rmtree(self.work_dir, ignore_errors=True)
        self.cluster = None
        return procs, shm


@contextlib.contextmanager
def harness(log: Callable[[str], None] = print) -> Iterator[Harness]:
    h = Harness(log)
    try:
        h.start()
        yield h
    finally:
        h.close()
