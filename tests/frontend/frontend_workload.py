"""The workload the browser tests look at: tasks that finish and fail, a tree of actors
(Parent -> Child -> Grandchild), a busy actor to profile, an infeasible actor, and objects
held in the store."""

from __future__ import annotations

import os
import time

import ember

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

    def spin_for(self, seconds: float) -> int:
        n = 0
        end = time.time() + seconds
        while time.time() < end:
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


def start(handles: dict) -> None:
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
    handles.update(
        parent=parent,
        victim=victim,
        spinner=spinner,
        infeasible=Infeasible.remote(),
        big=ember.put(b"x" * (2 * 1024 * 1024)),
        small=ember.put(12345),
    )
