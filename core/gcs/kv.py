"""The GCS's key-value store: cluster-wide values under (namespace, key), such as where the
dashboard and its agents listen (the CLI and the agents read those). Held in memory; it lives
as long as the GCS.
"""

from __future__ import annotations

from typing import Any

# Where the dashboard server writes its URL, as (namespace, key); ``cluster_info`` reads it.
DASHBOARD_URL_KEY = ("dashboard", b"url")


class KvStore:
    def __init__(self) -> None:
        self.kv: dict[tuple[str, bytes], bytes] = {}  # {(namespace, key): value}

    def get(self, key: tuple[str, bytes]) -> bytes | None:
        return self.kv.get(key)

    def h_kv_put(self, conn: Any, body: dict) -> bool:
        key = (body.get("namespace", ""), body["key"])
        if not body.get("overwrite", True) and key in self.kv:
            return False
        self.kv[key] = body["value"]
        return True

    def h_kv_get(self, conn: Any, body: dict) -> bytes | None:
        return self.kv.get((body.get("namespace", ""), body["key"]))

    def h_kv_del(self, conn: Any, body: dict) -> bool:
        return self.kv.pop((body.get("namespace", ""), body["key"]), None) is not None

    def h_kv_keys(self, conn: Any, body: dict) -> list[bytes]:
        ns, prefix = body.get("namespace", ""), body.get("prefix", b"")
        return [k for (space, k) in self.kv if space == ns and k.startswith(prefix)]
