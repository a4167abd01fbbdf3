"""Where the GCS keeps its tables so that they outlive its process.

The GCS holds its tables in memory and writes every change through a ``Store``
(``store.py``), which batches the changes of one event-loop turn into one write to a
backend and tells the GCS when they are durable; a reply that follows a change waits for
that. A GCS that starts reads every table back (``Store.load``). Backends:

- ``memory:`` (``memory.py``): nothing outlives the process (tests, benchmarks);
- ``sqlite:PATH`` (``sqlite.py``): the default, a SQLite file in WAL mode in the session
  directory; it survives the GCS process, not the loss of the head's disk;
- ``redis://HOST:PORT`` (``redis_backend.py``): a Redis server, which may outlive the whole
  head machine (the ``redis`` client is an optional dependency: ``pip install ember[redis]``).

A table is a map of bytes to bytes (the parts pickle their records); ``TABLES`` names them.
"""

from __future__ import annotations

import os

from ember.gcs.storage.store import TABLES, Backend, Change, Store

__all__ = ["TABLES", "Backend", "Change", "Store", "check_url", "default_url", "open_backend"]

SQLITE_FILE = "gcs_storage.sqlite3"


def default_url(session_dir: str) -> str:
    """The embedded default: a SQLite file in the session directory."""
    return "sqlite:" + os.path.join(session_dir, SQLITE_FILE)


def check_url(url: str) -> None:
    """Raises ValueError saying what is wrong with ``url`` (without connecting anywhere)."""
    if url in ("memory:", "memory") or (url.startswith("sqlite:") and len(url) > 7):
        return
    if url.startswith(("redis://", "rediss://")):
        try:
            import redis  # noqa: F401
        except ImportError:
            raise ValueError(f"{url} needs the redis client: pip install 'ember[redis]'") from None
        return
    raise ValueError(
        f"unknown GCS storage {url!r}: use memory:, sqlite:PATH or redis://HOST:PORT "
        "(e.g. ember start --head --storage redis://127.0.0.1:6379)"
    )


def open_backend(url: str, namespace: str = "default") -> Backend:
    """The backend ``url`` names (``memory:``, ``sqlite:PATH``, ``redis://HOST:PORT``).
    ``namespace`` keeps clusters apart that share one Redis server."""
    if url == "memory:" or url == "memory":
        from ember.gcs.storage.memory import MemoryBackend

        return MemoryBackend()
    if url.startswith("sqlite:"):
        from ember.gcs.storage.sqlite import SqliteBackend

        return SqliteBackend(url[len("sqlite:") :])
    if url.startswith(("redis://", "rediss://")):
        from ember.gcs.storage.redis_backend import RedisBackend

        return RedisBackend(url, namespace)
    check_url(url)  # raises, naming what is wrong
    raise AssertionError(url)
