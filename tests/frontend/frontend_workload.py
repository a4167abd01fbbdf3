"""The workload the browser tests look at: tasks that finish and fail, a tree of actors
(Parent -> Child -> Grandchild), a busy actor to profile, an infeasible actor, an actor
waiting for CPU another one holds, and objects held in the store."""

from __future__ import annotations

import os
import time

import ember
import httpx
from ember_test_utils import wait_until

LOG_MARKER = "ember-frontend-log-marker"


@ember.remote
def square(x: int) -> int:
    return x * x


@ember.remote
def slow_step(x: int) -> int:
    time.sleep(0.05)
    return x


@ember.remote(max_retries=0)
def explode(n: int) -> None:
    raise ValueError(f"frontend test failure {n}")


@ember.remote
def shout() -> str:
    print(LOG_MARKER, flush=True)
    return LOG_MARKER


@ember.remote(num_cpus=0)
class Grandchild:
    def ping(self) -> str:
        return "grandchild"


@ember.remote(num_cpus=0)
class Child:
    def __init__(self) -> None:
        self.kid = Grandchild.remote()

    def ready(self) -> str:
        return ember.get(self.kid.ping.remote())


@ember.remote(num_cpus=0)
class Parent:
    def __init__(self) -> None:
        self.kid = Child.remote()

    def ready(self) -> str:
        return ember.get(self.kid.ready.remote())


@ember.remote(num_cpus=0)
class Victim:
    def ping(self) -> int:
        return 1

    def pid(self) -> int:
        return os.getpid()

    def say(self, text: str) -> None:
        print(text, flush=True)


@ember.remote(num_cpus=0, max_concurrency=2)
class Spinner:
    """Burns CPU in a thread so a profile of it has samples in a known function."""

    def __init__(self) -> None:
        self.running = False

    def spin_for(self, seconds: float, stop_file: str | None = None) -> int:
        """Busy for ``seconds``, or until ``stop_file`` exists (the test is done with us)."""
        n = 0
        end = time.time() + seconds
        while time.time() < end and not (stop_file and os.path.exists(stop_file)):
            n += busy_loop_for_profile(2000)
        return n

    def ping(self) -> int:
        return 1


def busy_loop_for_profile(k: int) -> int:
    total = 0
    for i in range(k):
        total += i * i
    return total


# Asks for more CPUs than any node has: stays pending with an "infeasible" reason.
@ember.remote(num_cpus=64)
class Infeasible:
    def ping(self) -> int:
        return 1


# On the tests' 2-CPU node: the holder keeps 1 CPU, so the waiter (1.5) fits the node but not
# what is free, and stays pending (yellow) while one CPU is left for the tests' tasks.
@ember.remote(num_cpus=1)
class CpuHolder:
    def ping(self) -> int:
        return 1

    def pid(self) -> int:
        return os.getpid()


@ember.remote(num_cpus=1.5)
class CpuWaiter:
    def ping(self) -> int:
        return 1


def _holder_counted(dashboard_url: str) -> bool:
    """Whether the GCS counts the holder's CPU as taken, as the dashboard's poll reads it. The
    poll lists the actors before it reads the nodes, so a snapshot that shows the holder
    alive was read after its lease: what it says is free cannot predate the lease and go back
    up to 2 later."""
    alive = "/api/actors?filter=name=frontend_cpu_holder&filter=state=ALIVE"
    if httpx.get(f"{dashboard_url}{alive}", timeout=10).json()["total"] != 1:
        return False
    status = httpx.get(f"{dashboard_url}/api/cluster_status", timeout=10).json()
    free = status["resources"]["available"]
    return free.get("CPU", 0.0) <= 1


def start(handles: dict, dashboard_url: str) -> None:
    """Runs the workload; keeps handles (and so the actors and objects) in ``handles``."""
    ember.get([square.remote(i) for i in range(40)])
    ember.get([slow_step.remote(i) for i in range(8)])
    for i in range(3):
        try:
            ember.get(explode.remote(i))
        except Exception:
            pass
    ember.get(shout.remote())
    parent = Parent.options(name="frontend_parent").remote()
    ember.get(parent.ready.remote())
    victim = Victim.options(name="frontend_victim").remote()
    ember.get(victim.ping.remote())
    spinner = Spinner.options(name="frontend_spinner").remote()
    ember.get(spinner.ping.remote())
    holder = CpuHolder.options(name="frontend_cpu_holder").remote()
    ember.get(holder.ping.remote())
    # The GCS places actors by the free resources the node last reported: create the waiter
    # once the holder's CPU shows as taken, or it would be sent to the node to wait there.
    wait_until(
        lambda: _holder_counted(dashboard_url),
        timeout=30,
        message="the CPU holder's CPU to show as taken",
    )
    waiter = CpuWaiter.options(name="frontend_cpu_waiter").remote()
    handles.update(
        parent=parent,
        victim=victim,
        spinner=spinner,
        infeasible=Infeasible.remote(),
        holder=holder,
        waiter=waiter,
        big=ember.put(b"x" * (2 * 1024 * 1024)),
        small=ember.put(12345),
    )


@ember.remote(max_retries=0)
def hold_until(gate: str) -> str:
    """Runs until the file ``gate`` exists: a task the tests can watch while it is RUNNING."""
    deadline = time.time() + 120
    while not os.path.exists(gate):
        if time.time() > deadline:
            raise TimeoutError(f"no gate file {gate}")
        time.sleep(0.05)
    return "released"


@ember.remote
def record_metrics(depth: float) -> None:
    """Sets application metrics the Metrics page charts (written out at once, not at the next
    report interval)."""
    from ember.util import metrics

    metrics.Gauge("frontend_queue_depth", "queue depth", tag_keys=("queue",)).set(
        depth, tags={"queue": "inbox"}
    )
    metrics.Counter("frontend_items", "items handled").inc(3)
    metrics.flush()
