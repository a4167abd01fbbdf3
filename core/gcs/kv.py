"""The GCS's key-value store: cluster-wide values under (namespace, key), such as where the
dashboard and its agents listen (the CLI and the agents read those). Held in memory and
written through the GCS's storage, so it outlives a GCS process.
"""

from __future__ import annotations

import pickle
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ember.gcs.storage import Store

# Where the dashboard server writes its URL, as (namespace, key); ``cluster_info`` reads it.
DASHBOARD_URL_KEY = ("dashboard", b"url")


class KvStore:
    def __init__(self) -> None:
        self.kv: dict[tuple[str, bytes], bytes] = {}  # {(namespace, key): value}
        self.store: Store | None = None

    def restore(self, rows: dict[bytes, bytes]) -> None:
        for key, value in rows.items():
            self.kv[pickle.loads(key)] = value

    def put(self, key: tuple[str, bytes], value: bytes) -> None:
        self.kv[key] = value
        if self.store is not None:
            self.store.put("kv", pickle.dumps(key), value)

    def get(self, key: tuple[str, bytes]) -> bytes | None:
        return self.kv.get(key)

    def h_kv_put(self, conn: Any, body: dict) -> bool:
        key = (body.get("namespace", ""), body["key"])
        if not body.get("overwrite", True) and key in self.kv:
            return False
        self.put(key, body["value"])
        return True

    def h_kv_get(self, conn: Any, body: dict) -> bytes | None:
        return self.kv.get((body.get("namespace", ""), body["key"]))

    def h_kv_del(self, conn: Any, body: dict) -> bool:
        key = (body.get("namespace", ""), body["key"])
        if self.kv.pop(key, None) is None:
            return False
        if self.store is not None:
            self.store.delete("kv", pickle.dumps(key))
        return True

    def h_kv_keys(self, conn: Any, body: dict) -> list[bytes]:
        ns, prefix = body.get("namespace", ""), body.get("prefix", b"")
        return [k for (space, k) in self.kv if space == ns and k.startswith(prefix)]
