"""Per node type, how long to wait before launching again after launches failed (the provider
refused, or a node never joined): exponential, capped, reset by a node of that type joining.
A provider that keeps failing is asked less and less often, never hammered every tick."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass
class Backoff:
    base_s: float = 5.0
    max_s: float = 300.0

    def __post_init__(self) -> None:
        self.failures: dict[str, int] = {}
        self.until: dict[str, float] = {}

    def failed(self, node_type: str, now: float) -> float:
        """Counts a failure; the delay before the type may be launched again."""
        n = self.failures.get(node_type, 0) + 1
        self.failures[node_type] = n
        delay = min(self.base_s * 2 ** (n - 1), self.max_s)
        self.until[node_type] = now + delay
        return delay

    def succeeded(self, node_type: str) -> None:
        self.failures.pop(node_type, None)
        self.until.pop(node_type, None)

    def blocked(self, now: float) -> set[str]:
        """The types not to launch now."""
        return {t for t, until in self.until.items() if until > now}

    def to_record(self) -> dict[str, dict[str, float]]:
        return {
            t: {"failures": n, "until": self.until.get(t, 0.0)} for t, n in self.failures.items()
        }

    def restore(self, rec: Mapping[str, Mapping[str, float]]) -> None:
        for t, row in rec.items():
            self.failures[t] = int(row.get("failures", 0))
            self.until[t] = float(row.get("until", 0.0))
