"""How fully a store of N bytes is used, and what spilling costs, with mixed object sizes.

Two figures, on the object table alone (no processes, no I/O; spills are instant):

- **fill**: objects of the given sizes are created until the first that does not fit, with
  nothing spilled; the bytes held then, as a share of N. What is lost is per-object rounding
  and free runs too short for the next object (after churn: half the objects freed at random
  and the store filled again, 20 times; without compaction, and with the store moving
  unpinned copies together as the raylet does).
- **spill cost**: a workload holding twice N bytes of live objects (random sizes, each kept
  for a while, then freed) on a store that spills; the bytes spilled per byte created.
  Room is made either by the store's choice (the cheapest contiguous window of blocks,
  ``ember.object_store.room``) or, for comparison, by spilling least recently used objects
  one at a time until the object fits (what a plain LRU policy does).

Run: .venv/bin/python benchmarks/store_fragmentation.py [--store-mb 200] [--seed 1]
"""

from __future__ import annotations

import argparse
import random
from collections import deque

from ember.exceptions import ObjectStoreFullError
from ember.object_store.store import MoveNeeded, ObjectStore, SpillNeeded

MB = 1_000_000


def oid(n: int) -> bytes:
    return n.to_bytes(8, "big") + b"\x00" * 12


def fill(capacity: int, sizes: list[int]) -> float:
    store = ObjectStore(capacity)
    total = 0
    for i, size in enumerate(sizes):
        try:
            store.create(oid(i), size, "w")
        except ObjectStoreFullError:
            break
        total += size
    return total / capacity


def _create(store: ObjectStore, key: bytes, size: int) -> None:
    """``create``, carrying out the moves compaction asks for (instantly: no bytes here)."""
    while True:
        try:
            store.create(key, size, "w")
            store.seal(key)
            return
        except MoveNeeded as need:
            store.finish_moves(need, ok=True)


def fill_after_churn(
    capacity: int, rng: random.Random, compacting: bool, rounds: int = 20
) -> tuple[float, float]:
    """Filled, then each round half the objects (at random) freed and the store filled
    again with new random sizes until the first that does not fit: the worst and the mean
    round's share."""
    store = ObjectStore(capacity, compacting=compacting)
    held: dict[bytes, int] = {}
    shares, n = [], 0
    for _ in range(rounds + 1):
        while True:
            size = rng.randint(MB // 5, 25 * MB)
            try:
                _create(store, oid(n), size)
            except ObjectStoreFullError:
                break
            held[oid(n)] = size
            n += 1
        shares.append(sum(held.values()) / capacity)
        for key in rng.sample(sorted(held), len(held) // 2):
            store.delete(key)
            del held[key]
    return min(shares), sum(shares) / len(shares)


def _spill(store: ObjectStore, entries) -> int:
    done = 0
    for entry in entries:
        if store.begin_spill(entry) is not None:
            store.finish_spill(entry, f"/spill/{entry.object_id.hex()}")
            done += entry.size
    return done


def spill_cost(capacity: int, sizes: list[int], lifetime: int, lru_only: bool) -> float:
    store = ObjectStore(capacity, spilling=True)
    live: deque[bytes] = deque()
    spilled = created = 0
    for i, size in enumerate(sizes):
        while True:
            try:
                store.create(oid(i), size, "w")
                break
            except SpillNeeded as need:
                if lru_only:
                    # One least recently used primary at a time until the object fits.
                    spilled += _spill(store, store.spill_candidates(1, 1))
                else:
                    spilled += _spill(store, need.entries)
        store.seal(oid(i))
        created += size
        live.append(oid(i))
        if len(live) > lifetime:
            store.delete(live.popleft())
    return spilled / created


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store-mb", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    n = args.store_mb * MB
    rng = random.Random(args.seed)
    cases = {
        "equal 10 MB": [10 * MB] * 1000,
        "equal 1 MB": [MB] * 1000,
        "mixed 0.2-25 MB": [rng.randint(MB // 5, 25 * MB) for _ in range(1000)],
    }
    for name, sizes in cases.items():
        print(f"fill {name}: {fill(n, sizes):.1%} of {n} bytes")
    for compacting in (False, True):
        worst, mean = fill_after_churn(n, random.Random(args.seed), compacting)
        how = "with compaction" if compacting else "no compaction"
        print(f"fill mixed 0.2-25 MB after churn, {how}: worst {worst:.1%}, mean {mean:.1%}")
    mixed = [rng.randint(MB // 5, 25 * MB) for _ in range(3000)]
    # Objects live for as many puts as make about twice the store.
    lifetime = int(2 * n / (sum(mixed) / len(mixed)))
    for lru in (False, True):
        cost = spill_cost(n, mixed, lifetime, lru_only=lru)
        policy = "LRU one at a time" if lru else "contiguous window"
        print(f"spill cost, mixed sizes, 2x live, {policy}: {cost:.3f} bytes per byte put")


if __name__ == "__main__":
    main()
