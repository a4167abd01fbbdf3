"""The live stream's fan-out: one bounded queue per subscriber; a slow client loses its
oldest messages (counted and reported in the next message) rather than growing memory."""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any


class Subscriber:
    def __init__(self, maxlen: int, topics: frozenset[str] | None) -> None:
        self.queue: deque[dict[str, Any]] = deque()
        self.maxlen = maxlen
        self.topics = topics
        self.dropped = 0
        self.wakeup = asyncio.Event()

    def push(self, msg: dict[str, Any]) -> None:
        if self.topics is not None and msg["type"] not in self.topics:
            return
        if len(self.queue) >= self.maxlen:
            self.queue.popleft()
            self.dropped += 1
        self.queue.append(msg)
        self.wakeup.set()

    async def next_batch(self, timeout: float) -> list[dict[str, Any]]:
        """Messages waiting (empty after ``timeout``, so the caller can send keep-alives)."""
        if not self.queue:
            self.wakeup.clear()
            try:
                await asyncio.wait_for(self.wakeup.wait(), timeout)
            except TimeoutError:
                return []
        batch = list(self.queue)
        self.queue.clear()
        if self.dropped:
            batch.append({"type": "dropped", "count": self.dropped})
            self.dropped = 0
        return batch


class PubSub:
    def __init__(self, maxlen: int) -> None:
        self.maxlen = maxlen
        self.subscribers: set[Subscriber] = set()

    def subscribe(self, topics: frozenset[str] | None = None) -> Subscriber:
        sub = Subscriber(self.maxlen, topics)
        self.subscribers.add(sub)
        return sub

    def unsubscribe(self, sub: Subscriber) -> None:
        self.subscribers.discard(sub)

    def publish(self, msg: dict[str, Any]) -> None:
        for sub in self.subscribers:
            sub.push(msg)
