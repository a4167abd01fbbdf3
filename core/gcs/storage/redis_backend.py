"""The Redis backend: each table is a Redis hash, ``ember:<namespace>:<table>``, and a batch
is one MULTI/EXEC pipeline. The GCS's replies wait for Redis to acknowledge it; how durable
that is on Redis's side is Redis's own setting (``appendonly``/``appendfsync``).

The ``redis`` client (with ``hiredis``) is an optional dependency, needed only here.
"""

from __future__ import annotations

from ember.gcs.storage.store import TABLES, Change


class RedisBackend:
    def __init__(self, url: str, namespace: str = "default") -> None:
        try:
            import redis.asyncio as aioredis
        except ImportError as e:
            raise RuntimeError(
                f"GCS storage {url} needs the redis client: pip install 'ember[redis]' "
                "(or: pip install redis hiredis)"
            ) from e
        self.description = f"{url} (namespace {namespace!r})"
        self.prefix = f"ember:{namespace}:"
        # Every wait has a deadline: a Redis that stops answering fails the write, and the
        # GCS exits rather than acknowledge what it could not keep.
        self.client = aioredis.Redis.from_url(url, socket_timeout=10.0, socket_connect_timeout=5.0)

    async def load(self) -> dict[str, dict[bytes, bytes]]:
        pipe = self.client.pipeline(transaction=True)
        for table in TABLES:
            pipe.hgetall(self.prefix + table)
        rows = await pipe.execute()
        return {t: dict(r) for t, r in zip(TABLES, rows, strict=True)}

    async def write(self, changes: list[Change]) -> None:
        pipe = self.client.pipeline(transaction=True)
        for table, key, value in changes:
            if value is None:
                pipe.hdel(self.prefix + table, key)
            else:
                pipe.hset(self.prefix + table, key, value)
        await pipe.execute()

    async def close(self) -> None:
        await self.client.aclose()
