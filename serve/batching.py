"""``@serve.batch``: calls to a method made one request at a time are gathered into lists and
handed to the method together (Ray Serve's batching), up to ``max_batch_size`` or until
``batch_wait_timeout_s`` has passed since the first one arrived.

The decorated method takes lists (one list per positional argument) and returns a list with one
result per request, in order. Each replica instance has its own queue, on its own event loop.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Callable
from typing import Any

_QUEUE_ATTR = "__ember_serve_batch_queues__"


class _BatchQueue:
    def __init__(self, func: Callable, max_batch_size: int, timeout_s: float) -> None:
        self.func = func
        self.max_batch_size = max_batch_size
        self.timeout_s = timeout_s
        self.queue: asyncio.Queue = asyncio.Queue()
        self.worker = asyncio.get_running_loop().create_task(self._run())
        self.batch_sizes: list[int] = []  # the last sizes, bounded (for tests and the view)

    async def submit(self, args: tuple, kwargs: dict) -> Any:
        fut = asyncio.get_running_loop().create_future()
        await self.queue.put((args, kwargs, fut))
        return await fut

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = [await self.queue.get()]
            deadline = loop.time() + self.timeout_s
            while len(batch) < self.max_batch_size:
                remaining = deadline - loop.time()
                try:
                    if remaining <= 0:  # past the wait: take only what is already here
                        batch.append(self.queue.get_nowait())
                    else:
                        batch.append(await asyncio.wait_for(self.queue.get(), remaining))
                except (asyncio.QueueEmpty, TimeoutError):
                    break
            self.batch_sizes = (self.batch_sizes + [len(batch)])[-100:]
            await self._call(batch)

    async def _call(self, batch: list) -> None:
        live = [b for b in batch if not b[2].done()]  # a cancelled caller drops out
        if not live:
            return
        first_args, first_kwargs = live[0][0], live[0][1]
        args = [[b[0][i] for b in live] for i in range(len(first_args))]
        kwargs = {k: [b[1][k] for b in live] for k in first_kwargs}
        try:
            results = self.func(*args, **kwargs)
            if inspect.isawaitable(results):
                results = await results
            results = list(results)
            if len(results) != len(live):
                raise TypeError(
                    f"@serve.batch function {getattr(self.func, '__qualname__', self.func)} "
                    f"returned {len(results)} results for a batch of {len(live)} requests; "
                    "it must return one result per request, in order"
                )
        except Exception as e:
            for _, _, fut in live:
                if not fut.done():
                    fut.set_exception(e)
            return
        for (_, _, fut), result in zip(live, results, strict=True):
            if not fut.done():
                fut.set_result(result)


def batch(
    _func: Callable | None = None,
    *,
    max_batch_size: int = 10,
    batch_wait_timeout_s: float = 0.01,
    max_concurrent_batches: int = 1,
) -> Callable:
    """Ray's ``@serve.batch`` (bare or with arguments)."""
    if isinstance(max_batch_size, bool) or not isinstance(max_batch_size, int):
        raise TypeError(f"max_batch_size must be an integer >= 1, got {max_batch_size!r}")
    if max_batch_size < 1:
        raise ValueError(f"max_batch_size must be an integer >= 1, got {max_batch_size!r}")
    if not isinstance(batch_wait_timeout_s, int | float) or batch_wait_timeout_s < 0:
        raise ValueError(
            f"batch_wait_timeout_s must be a number >= 0, got {batch_wait_timeout_s!r}"
        )

    def wrap(func: Callable) -> Callable:
        params = list(inspect.signature(func).parameters)
        is_method = bool(params) and params[0] == "self"

        @functools.wraps(func)
        async def batched(*args: Any, **kwargs: Any) -> Any:
            owner, call_args = (args[0], args[1:]) if is_method else (batched, args)
            queues = owner.__dict__.setdefault(_QUEUE_ATTR, {})
            loop = asyncio.get_running_loop()
            queue = queues.get((func.__name__, id(loop)))
            if queue is None:
                bound = functools.partial(func, owner) if is_method else func
                queue = _BatchQueue(bound, max_batch_size, batch_wait_timeout_s)
                queues[(func.__name__, id(loop))] = queue
            return await queue.submit(call_args, kwargs)

        batched._ember_batch = (max_batch_size, batch_wait_timeout_s)  # type: ignore[attr-defined]
        return batched

    return wrap(_func) if _func is not None else wrap
