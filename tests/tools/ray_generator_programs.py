"""One program of generator tasks, run on Ray and on Ember:

    tests/tools/.ray-venv/bin/python tests/tools/ray_generator_programs.py ray
    .venv/bin/python tests/tools/ray_generator_programs.py ember

prints one JSON object: ``same``, the outcomes both must agree on, and ``own``, the cases
where Ember means to differ (``tests/test_generators_ray_compare.py`` says which and why).
The runtime is imported by the name given, as a migrated program does with
``import ember as ray``; the program uses nothing else but the standard library.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import sys
import tempfile
import time
from typing import Any


def outcome(fn: Any) -> Any:
    """``["ok", fn()]``, or what the exception of ``fn()`` is an instance of among the classes
    a caller would catch (a Ray task error is also an instance of the user's class)."""
    try:
        return ["ok", fn()]
    except BaseException as e:  # noqa: BLE001 - the outcome is what is compared
        kinds = [
            k.__name__
            for k in (StopIteration, StopAsyncIteration, ValueError, KeyError, TypeError)
            if isinstance(e, k)
        ]
        for k in ("WorkerCrashedError", "TaskCancelledError", "ActorDiedError"):
            if any(c.__name__ == k for c in type(e).__mro__):
                kinds.append(k)
        return ["raised", kinds or [type(e).__name__]]


def drain(ray: Any, gen: Any) -> list:
    """Every item's value, or the outcome of the first that raised; then what next() does."""
    out = []
    for ref in gen:
        got = outcome(lambda ref=ref: ray.get(ref))
        out.append(got[1] if got[0] == "ok" else got)
    out.append(outcome(lambda: next(gen)))
    return out


def counter(ray: Any) -> Any:
    @ray.remote
    def count_to(n):
        for i in range(n):  # noqa: UP028 - Ray 2.60 fails `yield from` a range in a task
            yield i

    return count_to


def cases(ray: Any) -> dict:
    count_to = counter(ray)

    @ray.remote
    def fail_at(n):
        for i in range(n):  # noqa: UP028 - as above
            yield i
        raise ValueError("failed")

    @ray.remote(max_retries=0)
    def crash():
        yield "a"
        os._exit(1)

    @ray.remote(max_retries=2)
    def crash_once(marker):
        for i in range(4):
            yield i
            if i == 1 and not os.path.exists(marker):
                open(marker, "w").close()
                os._exit(1)

    @ray.remote(retry_exceptions=[ValueError], max_retries=3)
    def raise_once(marker):
        for i in range(4):
            if i == 2 and not os.path.exists(marker):
                open(marker, "w").close()
                raise ValueError("once")
            yield i

    @ray.remote
    def forever():
        i = 0
        while True:
            yield i
            i += 1
            time.sleep(0.1)

    @ray.remote
    class Streamer:
        def numbers(self, n):
            for i in range(n):  # noqa: UP028 - as above
                yield i

        async def async_numbers(self, n):
            for i in range(n):
                await asyncio.sleep(0.01)
                yield i

    def plain():
        return 1

    out: dict[str, Any] = {}
    gen = count_to.remote(3)
    out["type"] = type(gen).__name__
    out["basic"] = drain(ray, gen)
    out["completed"] = outcome(lambda: ray.get(gen.completed()))
    out["is_finished"] = gen.is_finished()
    out["error_item"] = drain(ray, fail_at.remote(2))
    gen = fail_at.remote(1)
    drain(ray, gen)
    out["error_completed"] = outcome(lambda: ray.get(gen.completed()))
    gen = crash.remote()
    first = ray.get(next(gen))
    last = next(gen)
    out["crash"] = [first, last == gen.completed(), outcome(lambda: ray.get(last))]
    out["crash_then"] = outcome(lambda: next(gen))
    with tempfile.TemporaryDirectory() as tmp:
        out["crash_retry"] = drain(ray, crash_once.remote(os.path.join(tmp, "crashed")))
        out["exception_retry"] = drain(ray, raise_once.remote(os.path.join(tmp, "raised")))
    gen = forever.remote()
    out["cancel_first"] = ray.get(next(gen))
    ray.cancel(gen)
    out["cancel_rest"] = outcome(lambda: [ray.get(r) for r in gen])
    out["cancel_then"] = outcome(lambda: next(gen))

    out["static"] = outcome(lambda: ray.get(count_to.options(num_returns=2).remote(2)))
    out["static_fewer"] = outcome(lambda: ray.get(count_to.options(num_returns=3).remote(2)))
    out["static_one"] = outcome(lambda: ray.get(count_to.options(num_returns=1).remote(1)))
    dyn = ray.get(count_to.options(num_returns="dynamic").remote(3))
    out["dynamic"] = [type(dyn).__name__, len(dyn), [ray.get(r) for r in dyn]]
    refs = list(ray.get(fail_at.options(num_returns="dynamic").remote(1)))
    out["dynamic_error"] = [outcome(lambda r=r: ray.get(r)) for r in refs]

    actor = Streamer.remote()
    out["actor"] = drain(ray, actor.numbers.remote(3))
    out["actor_async"] = drain(ray, actor.async_numbers.remote(3))
    out["actor_static"] = ray.get(actor.numbers.options(num_returns=2).remote(2))
    out["actor_dynamic"] = [
        ray.get(r) for r in ray.get(actor.numbers.options(num_returns="dynamic").remote(2))
    ]

    async def consume():
        got = []
        async for ref in count_to.remote(3):
            got.append(await ref)
        gen = count_to.remote(0)
        try:
            await gen.__anext__()
        except StopAsyncIteration:
            got.append("StopAsyncIteration")
        return got

    out["async_for"] = asyncio.run(consume())
    gen = count_to.remote(1)
    out["wait"] = len(ray.wait([gen], timeout=30)[0])
    out["streaming_not_generator"] = outcome(lambda: ray.remote(num_returns="streaming")(plain))
    out["dynamic_not_generator"] = outcome(lambda: ray.remote(plain).options(num_returns="dynamic"))
    out["negative"] = outcome(lambda: ray.remote(num_returns=-1)(plain))
    out["exports"] = [hasattr(ray, n) for n in ("ObjectRefGenerator", "DynamicObjectRefGenerator")]
    return out


def own_cases(ray: Any) -> dict:
    count_to = counter(ray)

    @ray.remote
    async def ticks(n):
        for i in range(n):
            await asyncio.sleep(0.01)
            yield i

    return {
        # Ray keeps the first N and only logs the error on the worker.
        "static_more": outcome(lambda: ray.get(count_to.options(num_returns=2).remote(3))),
        # Ray 2.60 fails an async generator task (a TypeError inside Ray).
        "async_generator_task": outcome(lambda: [ray.get(r) for r in ticks.remote(2)]),
    }


def main(name: str) -> None:
    ray = importlib.import_module(name)
    ray.init(num_cpus=2, include_dashboard=False)
    try:
        result = {"same": cases(ray), "own": own_cases(ray)}
    finally:
        ray.shutdown()
    print(json.dumps(result, sort_keys=True))


if __name__ == "__main__":
    main(sys.argv[1])
