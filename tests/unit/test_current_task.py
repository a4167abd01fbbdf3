"""``CurrentTask``: a thread's own fields, and each async call's own through a context
variable, so calls running side by side on one event loop never see each other's."""

from __future__ import annotations

import asyncio
import threading

from ember.core_worker.current_task import CurrentTask, enter_async_call, leave_async_call


def test_async_calls_on_one_loop_each_see_their_own_fields():
    current = CurrentTask()

    async def call(task_id: bytes, pause: float) -> list:
        token = enter_async_call({"task_id": task_id, "is_actor": True})
        try:
            before = current.task_id
            await asyncio.sleep(pause)  # the other call enters meanwhile
            return [before, current.task_id, current.is_actor]
        finally:
            leave_async_call(token)

    async def both() -> list:
        return await asyncio.gather(call(b"first", 0.05), call(b"second", 0.0))

    assert asyncio.run(both()) == [[b"first", b"first", True], [b"second", b"second", True]]
    assert getattr(current, "task_id", None) is None  # outside any call: nothing


def test_a_threads_own_field_wins_and_stays_on_its_thread():
    current = CurrentTask()
    current.task_id = b"main"
    seen = []
    worker = threading.Thread(target=lambda: seen.append(getattr(current, "task_id", None)))
    worker.start()
    worker.join(10)
    assert seen == [None] and current.task_id == b"main"

    async def inside() -> bytes:
        token = enter_async_call({"task_id": b"async"})
        try:
            return current.task_id  # the thread's own field is read first
        finally:
            leave_async_call(token)

    assert asyncio.run(inside()) == b"main"
