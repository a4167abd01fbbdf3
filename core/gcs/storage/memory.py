"""The in-memory backend: tables live as long as the process (tests, benchmarks, and a
GCS that is meant to forget everything when it stops)."""

from __future__ import annotations

from ember.gcs.storage.store import Change


class MemoryBackend:
    description = "memory"

    def __init__(self) -> None:
        self.tables: dict[str, dict[bytes, bytes]] = {}

    async def load(self) -> dict[str, dict[bytes, bytes]]:
        return {t: dict(rows) for t, rows in self.tables.items()}

    def write(self, changes: list[Change]) -> None:
        for table, key, value in changes:
            rows = self.tables.setdefault(table, {})
            if value is None:
                rows.pop(key, None)
            else:
                rows[key] = value

    async def close(self) -> None:
        pass
