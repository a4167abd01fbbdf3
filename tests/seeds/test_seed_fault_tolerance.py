"""Ray 0.8's documentation, "Fault Tolerance": task retries and actor reconstruction.

Tasks whose worker dies are rerun up to ``max_retries`` times (default 4), then ``ray.get``
raises ``RayWorkerError``. Actors whose process dies are reconstructed by rerunning the
constructor up to ``max_reconstructions`` times (default 0); the call that was running and
every call after the last reconstruction raise ``RayActorError``.
"""

from __future__ import annotations

import os
import time

import ember as ray
import numpy as np
import pytest

pytestmark = pytest.mark.timeout(120)


def test_task_retries_program(printed) -> None:
    """The document's program; each of the three runs prints SUCCESS or FAILURE."""
    ray.init(ignore_reinit_error=True)

    @ray.remote(max_retries=1)
    def potentially_fail(failure_probability):
        time.sleep(0.2)
        if np.random.random() < failure_probability:
            os._exit(0)
        return 0

    for _ in range(3):
        try:
            # If this task crashes, Ray will retry it up to one additional
            # time. If either of the attempts succeeds, the call to ray.get
            # below will return normally. Otherwise, it will raise an
            # exception.
            ray.get(potentially_fail.remote(0.5))
            print("SUCCESS")
        except ray.exceptions.RayWorkerError:
            print("FAILURE")

    lines = printed()
    assert len(lines) == 3
    assert set(lines) <= {"SUCCESS", "FAILURE"}

    # The same function with the outcome fixed: it never fails, or it always does.
    assert ray.get(potentially_fail.remote(0.0)) == 0
    with pytest.raises(ray.exceptions.RayWorkerError):
        ray.get(potentially_fail.remote(1.0))


def test_task_retried_once_then_succeeds(tmp_path) -> None:
    """The document says "if either of the attempts succeeds, the call to ray.get below will return
    normally": the first attempt dies, the retry succeeds."""
    ray.init(ignore_reinit_error=True)
    marker = tmp_path / "first-attempt-died"

    @ray.remote(max_retries=1)
    def fail_first_time(path):
        if not os.path.exists(path):
            open(path, "w").close()
            os._exit(0)
        return "second attempt"

    assert ray.get(fail_first_time.remote(str(marker))) == "second attempt"


def _attempts_of_dying_task(tmp_path, **options) -> int:
    log = tmp_path / "attempts"

    def always_die(path):
        with open(path, "a") as f:
            f.write("attempt\n")
        os._exit(0)

    task = ray.remote(**options)(always_die) if options else ray.remote(always_die)
    with pytest.raises(ray.exceptions.RayWorkerError):
        ray.get(task.remote(str(log)))
    return len(log.read_text().splitlines())


def test_max_retries_counts_attempts(tmp_path) -> None:
    """``max_retries=1``: "Ray will retry it up to one additional time": two attempts."""
    ray.init(ignore_reinit_error=True)
    assert _attempts_of_dying_task(tmp_path, max_retries=1) == 2


def test_default_retries(tmp_path) -> None:
    """ "The default number of retries is 4": five attempts in all."""
    ray.init(ignore_reinit_error=True)
    assert _attempts_of_dying_task(tmp_path) == 5


def test_actor_reconstruction_program(printed) -> None:
    """The document's program as written (60 calls of 0.2 s: about 12 s).

    Each life of the actor answers 1..9, then dies on the 10th call (FAILURE). The
    constructor reruns on each of the 5 reconstructions (so counting restarts at 1); after
    the 6th life every call fails.
    """
    ray.init(ignore_reinit_error=True)

    @ray.remote(max_reconstructions=5)
    class Actor:
        def __init__(self):
            self.counter = 0

        def increment_and_possibly_fail(self):
            self.counter += 1
            time.sleep(0.2)
            if self.counter == 10:
                os._exit(0)
            return self.counter

    actor = Actor.remote()

    # The actor will be reconstructed up to 5 times. After that, methods will
    # raise exceptions. The actor is reconstructed by rerunning its
    # constructor. Methods that were executing when the actor died will also
    # raise exceptions.
    for _ in range(100):
        try:
            counter = ray.get(actor.increment_and_possibly_fail.remote())
            print(counter)
        except ray.exceptions.RayActorError:
            print("FAILURE")

    one_life = [str(i) for i in range(1, 10)] + ["FAILURE"]
    expected = one_life * 6 + ["FAILURE"] * 40
    assert printed() == expected


def test_actor_not_reconstructed_by_default() -> None:
    """ "max_reconstructions ... by default is 0": once the process dies, the call that was
    running and every later call raise RayActorError."""
    ray.init(ignore_reinit_error=True)

    @ray.remote
    class Actor:
        def __init__(self):
            self.counter = 0

        def increment(self):
            self.counter += 1
            return self.counter

        def die(self):
            os._exit(0)

    actor = Actor.remote()
    assert ray.get(actor.increment.remote()) == 1
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(actor.die.remote())
    started = time.monotonic()
    for _ in range(3):
        with pytest.raises(ray.exceptions.RayActorError):
            ray.get(actor.increment.remote())
    # A dead actor's calls fail at once rather than waiting for a restart.
    assert time.monotonic() - started < 10
