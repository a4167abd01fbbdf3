"""The default backend: one SQLite file in the session directory, in WAL mode.

A batch is one transaction, committed on the GCS's loop before its replies go out (a commit
here costs tens of microseconds: WAL appends, and ``synchronous=NORMAL`` leaves the fsync to
checkpoints). That survives the GCS process dying at any point; a power loss of the head
may lose the last transactions (the head's own processes are gone then too).
"""

from __future__ import annotations

import os
import sqlite3

from ember.gcs.storage.store import Change


class SqliteBackend:
    def __init__(self, path: str) -> None:
        if not path:
            raise ValueError("sqlite: storage needs a file path, e.g. sqlite:/tmp/gcs.sqlite3")
        self.description = f"sqlite:{path}"
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        # Owner-only from the start: the file holds the cluster's token and actor specs
        # (SQLite gives its -wal and -shm files the database file's mode).
        os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))
        # The GCS's loop is the only user; autocommit off so a batch is one transaction.
        self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.execute(
            "CREATE TABLE IF NOT EXISTS gcs (tbl TEXT NOT NULL, key BLOB NOT NULL, "
            "value BLOB NOT NULL, PRIMARY KEY (tbl, key)) WITHOUT ROWID"
        )

    async def load(self) -> dict[str, dict[bytes, bytes]]:
        tables: dict[str, dict[bytes, bytes]] = {}
        for table, key, value in self.db.execute("SELECT tbl, key, value FROM gcs"):
            tables.setdefault(table, {})[bytes(key)] = bytes(value)
        return tables

    def write(self, changes: list[Change]) -> None:
        puts = [(t, k, v) for t, k, v in changes if v is not None]
        deletes = [(t, k) for t, k, v in changes if v is None]
        db = self.db
        db.execute("BEGIN")
        try:
            if puts:
                db.executemany(
                    "INSERT OR REPLACE INTO gcs (tbl, key, value) VALUES (?, ?, ?)", puts
                )
            if deletes:
                db.executemany("DELETE FROM gcs WHERE tbl = ? AND key = ?", deletes)
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    async def close(self) -> None:
        self.db.close()
