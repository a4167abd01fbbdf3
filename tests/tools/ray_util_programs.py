"""One program for Ray's libraries, run on Ray and on Ember: ``ray.util.queue``,
``ray.util.multiprocessing`` and ``ray.util.joblib``.

    tests/tools/.ray-venv/bin/python tests/tools/ray_util_programs.py ray
    .venv/bin/python tests/tools/ray_util_programs.py ember

prints one JSON object: ``same``, the outcomes both must agree on, and ``own``, the cases
where Ember means to differ from Ray (``tests/test_util_ray_compare.py`` states which and
why). The program imports the runtime by the name it is given, as a migrated program does
with ``import ember as ray``; it uses nothing but the standard library otherwise.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import queue as stdlib_queue
import sys
import time
from typing import Any


def outcome(fn: Any) -> Any:
    """The value of ``fn()``, or the name of the exception it raised (its stdlib bases too,
    so a Ray error that is also a ValueError compares by what callers catch)."""
    try:
        return ["ok", fn()]
    except BaseException as e:  # noqa: BLE001 - the outcome is what is compared
        return ["raised", type(e).__name__, str(e)[:60]]


def caught(fn: Any, *kinds: type[BaseException]) -> str:
    """Which of ``kinds`` the exception of ``fn()`` is an instance of: what ``except`` sees."""
    try:
        fn()
    except BaseException as e:  # noqa: BLE001
        return ",".join(k.__name__ for k in kinds if isinstance(e, k)) or type(e).__name__
    return "no error"


def square(x: int) -> int:
    return x * x


def add(a: int, b: int) -> int:
    return a + b


def fail_on_three(x: int) -> int:
    if x == 3:
        raise ValueError("three")
    return x


def set_marker(value: str) -> None:
    os.environ["UTIL_COMPARE_MARKER"] = value


def read_marker(_: object) -> str | None:
    return os.environ.get("UTIL_COMPARE_MARKER")


def worker_pid(_: object) -> int:
    return os.getpid()


def returns_exception(_: object) -> Exception:
    return KeyError("a value")


def queue_cases(ray: Any, name: str) -> dict[str, Any]:
    qmod = importlib.import_module(f"{name}.util.queue")
    Queue, Empty, Full = qmod.Queue, qmod.Empty, qmod.Full

    @ray.remote
    def producer(q: Any, n: int) -> int:
        for i in range(n):
            q.put(i)
        return n

    q = Queue(maxsize=2)
    out: dict[str, Any] = {
        "subclass": [issubclass(Empty, stdlib_queue.Empty), issubclass(Full, stdlib_queue.Full)],
        "empty_at_start": [q.empty(), q.full(), q.qsize(), len(q)],
    }
    q.put(1)
    q.put(2)
    out["sizes"] = [q.empty(), q.full(), q.size()]
    out["put_nowait_full"] = caught(lambda: q.put_nowait(3), Full, stdlib_queue.Full)
    out["put_timeout_full"] = caught(lambda: q.put(3, timeout=0.2), Full)
    out["negative_timeout"] = caught(lambda: q.put(3, timeout=-1), ValueError)
    out["fifo"] = [q.get(), q.get()]
    out["get_nowait_empty"] = caught(q.get_nowait, Empty, stdlib_queue.Empty)
    out["get_timeout_empty"] = caught(lambda: q.get(timeout=0.2), Empty)
    q.put_nowait_batch([7, 8])
    out["batch_overflow"] = caught(lambda: q.put_nowait_batch([9]), Full)
    out["after_overflow"] = q.qsize()
    out["batch_too_many"] = caught(lambda: q.get_nowait_batch(3), Empty)
    out["batch_get"] = q.get_nowait_batch(2)
    out["batch_type_errors"] = [
        caught(lambda: q.put_nowait_batch(5), TypeError),
        caught(lambda: q.get_nowait_batch("2"), TypeError),
        caught(lambda: q.get_nowait_batch(-1), ValueError),
    ]
    big = Queue()
    done = producer.remote(big, 5)
    out["from_a_task"] = [big.get(timeout=30) for _ in range(5)] + [ray.get(done)]

    async def use_async() -> list[Any]:
        await big.put_async("a")
        got = [await big.get_async(timeout=5)]
        try:
            await big.get_async(block=False)
        except Empty:
            got.append("empty")
        return got

    out["async"] = asyncio.run(use_async())
    q.shutdown()
    big.shutdown(force=True)
    return out


def queue_own_cases(name: str) -> dict[str, Any]:
    qmod = importlib.import_module(f"{name}.util.queue")
    q = qmod.Queue()
    q.put("there")
    # Ray's zero timeout gives up before it looks; Ember returns the item (as queue.Queue).
    result = {"get_timeout_zero_with_an_item": outcome(lambda: q.get(timeout=0))}
    q.shutdown()
    return result


def pool_cases(ray: Any, name: str) -> dict[str, Any]:
    mp = importlib.import_module(f"{name}.util.multiprocessing")
    out: dict[str, Any] = {}
    with mp.Pool(2) as p:
        out["map"] = p.map(square, range(10))
        out["map_chunked"] = p.map(square, range(7), chunksize=3)
        out["starmap"] = p.starmap(add, [(1, 2), (3, 4)])
        out["apply"] = p.apply(add, (1, 5))
        r = p.apply_async(square, (9,))
        out["apply_async"] = [r.get(timeout=30), r.ready(), r.successful()]
        out["imap"] = list(p.imap(square, range(6)))
        out["imap_iterator"] = list(p.imap(square, iter(range(6)), chunksize=2))
        out["imap_unordered"] = sorted(p.imap_unordered(square, range(6)))
        # An item's error comes back from next() as Ray's wrapper object (multiprocessing
        # would raise it) and the iteration goes on; the wrapper holds the item's exception.
        for name in ("imap", "imap_unordered"):
            items = []
            for value in getattr(p, name)(fail_on_three, range(5)):
                if isinstance(value, int):
                    items.append(value)
                else:
                    items.append([type(value).__name__, type(value.underlying).__name__])
            out[f"{name}_error"] = sorted(items, key=str)
        out["map_error"] = outcome(lambda: p.map(fail_on_three, range(5)))
        errors: list[BaseException] = []
        got: list[Any] = []
        r = p.map_async(fail_on_three, range(5), callback=got.append, error_callback=errors.append)
        r.wait(30)
        out["error_callbacks"] = [len(errors), list(got), r.successful()]
        p.map_async(square, range(3), callback=got.append).wait(30)
        out["callback"] = [sorted(values) for values in got]  # Ray's list is in finishing order
        slow = p.apply_async(time.sleep, (1,))
        out["get_timeout"] = caught(lambda: slow.get(timeout=0.05), mp.TimeoutError)
        out["not_ready"] = caught(slow.successful, ValueError)
        slow.wait(30)
        out["join_running"] = caught(p.join, ValueError)
    out["closed"] = caught(lambda: p.map(square, [1]), ValueError)
    with mp.Pool(2, initializer=set_marker, initargs=("init",)) as p:
        out["initializer"] = sorted(set(p.map(read_marker, range(4), chunksize=1)))
    p = mp.Pool(1, maxtasksperchild=1)
    out["maxtasksperchild_pids"] = len(set(p.map(worker_pid, range(3), chunksize=1)))
    p.close()
    p.join()
    out["too_many_processes"] = caught(lambda: mp.Pool(3), ValueError)
    return out


def pool_own_cases(name: str) -> dict[str, Any]:
    mp = importlib.import_module(f"{name}.util.multiprocessing")
    out: dict[str, Any] = {}
    with mp.Pool(2) as p:
        # A returned exception object is a value in multiprocessing; Ray raises it.
        out["returned_exception"] = outcome(lambda: type(p.apply(returns_exception, (0,))).__name__)
        # error_callback gets the item's exception (multiprocessing); Ray's gets its wrapper.
        errors: list[BaseException] = []
        p.map_async(fail_on_three, range(5), error_callback=errors.append).wait(30)
        out["error_callback_gets"] = [type(e).__name__ for e in errors]
        # callback gets the values in the items' order (multiprocessing); Ray's, as they finish.
        got: list[Any] = []
        p.map_async(square, range(8), chunksize=1, callback=got.append).wait(30)
        out["callback_order"] = got
    return out


def joblib_cases(name: str) -> dict[str, Any]:
    import joblib

    jl = importlib.import_module(f"{name}.util.joblib")
    jl.register_ray()
    with joblib.parallel_backend("ray", n_jobs=2):
        values = joblib.Parallel()(joblib.delayed(square)(i) for i in range(8))
        error = caught(
            lambda: joblib.Parallel()(joblib.delayed(fail_on_three)(i) for i in range(5)),
            ValueError,
        )
        pids = set(joblib.Parallel(batch_size=1)(joblib.delayed(worker_pid)(i) for i in range(4)))
    with joblib.parallel_config(backend="ray", n_jobs=2):
        config = joblib.Parallel()(joblib.delayed(add)(i, 1) for i in range(4))
    return {
        "values": values,
        "error": error,
        "elsewhere": os.getpid() not in pids,
        "parallel_config": config,
    }


def joblib_own_cases(name: str) -> dict[str, Any]:
    import joblib

    importlib.import_module(f"{name}.util.joblib").register_ray()
    with joblib.parallel_config(backend="ray", n_jobs=2):
        # Ray's backend refuses return_as="generator" (a MultiprocessingBackend); Ember's serves it.
        return {
            "generator": outcome(
                lambda: list(
                    joblib.Parallel(return_as="generator")(
                        joblib.delayed(square)(i) for i in range(3)
                    )
                )
            )
        }


def main(name: str) -> None:
    ray = importlib.import_module(name)
    ray.init(num_cpus=2, include_dashboard=False)
    try:
        same = {"queue": queue_cases(ray, name), "pool": pool_cases(ray, name)}
        own = {"queue": queue_own_cases(name), "pool": pool_own_cases(name)}
        try:
            import joblib  # noqa: F401
        except ImportError:
            same["joblib"] = own["joblib"] = "joblib is not installed"
        else:
            same["joblib"] = joblib_cases(name)
            own["joblib"] = joblib_own_cases(name)
    finally:
        ray.shutdown()
    print(json.dumps({"same": same, "own": own}, sort_keys=True))


if __name__ == "__main__":
    main(sys.argv[1])
