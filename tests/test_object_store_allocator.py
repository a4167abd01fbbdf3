"""The arena allocator: placement, coalescing, exhaustion, and a randomized model check."""

from __future__ import annotations

import random

import pytest
from ember.object_store.allocator import ArenaAllocator

A = 4096


def test_first_allocations_are_packed_from_zero_and_rounded() -> None:
    alloc = ArenaAllocator(10 * A)
    assert alloc.allocate(1) == 0
    assert alloc.allocate(A) == A
    assert alloc.allocate(A + 1) == 2 * A
    assert alloc.used == 4 * A
    assert alloc.free_bytes == 6 * A
    assert alloc.num_allocations == 3
    assert alloc.largest_free() == 6 * A


def test_zero_size_takes_one_unit() -> None:
    alloc = ArenaAllocator(4 * A)
    first = alloc.allocate(0)
    second = alloc.allocate(0)
    assert (first, second) == (0, A)
    assert alloc.used == 2 * A
    assert alloc.free(first) == A


def test_custom_alignment_and_capacity_rounding() -> None:
    alloc = ArenaAllocator(1000, alignment=64)
    assert alloc.capacity == 960
    offsets = [alloc.allocate(10) for _ in range(15)]
    assert offsets == [i * 64 for i in range(15)]
    assert alloc.allocate(1) is None


def test_exhaustion_returns_none_and_free_restores_space() -> None:
    alloc = ArenaAllocator(4 * A)
    offsets = [alloc.allocate(A) for _ in range(4)]
    assert None not in offsets
    assert alloc.allocate(1) is None
    assert alloc.largest_free() == 0
    assert alloc.free(offsets[2]) == A
    assert alloc.allocate(A) == offsets[2]


def test_too_large_request_fails_without_side_effects() -> None:
    alloc = ArenaAllocator(4 * A)
    assert alloc.allocate(4 * A + 1) is None
    assert alloc.used == 0
    assert alloc.free_blocks() == [(0, 4 * A)]


def test_free_coalesces_with_both_neighbours() -> None:
    alloc = ArenaAllocator(5 * A)
    a, b, c, d, e = (alloc.allocate(A) for _ in range(5))
    alloc.free(a)
    alloc.free(c)
    assert alloc.free_blocks() == [(a, A), (c, A)]
    alloc.free(b)  # joins a, b and c into one run
    assert alloc.free_blocks() == [(0, 3 * A)]
    alloc.free(e)
    alloc.free(d)
    assert alloc.free_blocks() == [(0, 5 * A)]
    assert alloc.largest_free() == 5 * A
    assert alloc.used == 0


def test_best_fit_prefers_smallest_adequate_block() -> None:
    alloc = ArenaAllocator(20 * A)
    # Layout: [3A hole][A used][A hole][A used][2A hole][A used][rest free]
    big = alloc.allocate(3 * A)
    keep1 = alloc.allocate(A)
    small = alloc.allocate(A)
    keep2 = alloc.allocate(A)
    mid = alloc.allocate(2 * A)
    keep3 = alloc.allocate(A)
    assert None not in (keep1, keep2, keep3)
    for off in (big, small, mid):
        alloc.free(off)
    assert alloc.allocate(A) == small
    assert alloc.allocate(2 * A) == mid
    assert alloc.allocate(2 * A) == big  # only the 3A hole fits; its remainder stays free
    assert alloc.allocate(A) == big + 2 * A


def test_best_fit_ties_go_to_lowest_offset() -> None:
    alloc = ArenaAllocator(8 * A)
    offsets = [alloc.allocate(A) for _ in range(8)]
    for off in (offsets[5], offsets[1], offsets[3]):
        alloc.free(off)
    assert alloc.allocate(A) == offsets[1]
    assert alloc.allocate(A) == offsets[3]
    assert alloc.allocate(A) == offsets[5]


def test_freeing_unknown_offset_raises_naming_it() -> None:
    alloc = ArenaAllocator(4 * A)
    off = alloc.allocate(2 * A)
    with pytest.raises(ValueError, match=str(A)):
        alloc.free(A)  # inside the block, but not its start
    alloc.free(off)
    with pytest.raises(ValueError, match="offset 0 "):
        alloc.free(off)  # double free


def test_invalid_arguments() -> None:
    with pytest.raises(ValueError):
        ArenaAllocator(A, alignment=0)
    with pytest.raises(ValueError):
        ArenaAllocator(-1)
    with pytest.raises(ValueError):
        ArenaAllocator(A).allocate(-1)


def test_zero_capacity_allocates_nothing() -> None:
    alloc = ArenaAllocator(100)  # rounds down to nothing
    assert alloc.capacity == 0
    assert alloc.allocate(0) is None
    assert alloc.largest_free() == 0


class _ReferenceModel:
    """A byte-map model: one slot per alignment unit, True where allocated."""

    def __init__(self, units: int) -> None:
        self.units = [False] * units
        self.blocks: dict[int, int] = {}  # start unit -> length in units

    def free_runs(self) -> list[tuple[int, int]]:
        runs = []
        start = None
        for i, used in enumerate([*self.units, True]):
            if not used and start is None:
                start = i
            elif used and start is not None:
                runs.append((start, i - start))
                start = None
        return runs

    def best_fit(self, need: int) -> int | None:
        fits = [(length, start) for start, length in self.free_runs() if length >= need]
        return min(fits)[1] if fits else None


@pytest.mark.parametrize("seed", range(8))
def test_random_sequences_match_reference_model(seed: int) -> None:
    rng = random.Random(seed)
    units = 256
    alloc = ArenaAllocator(units * A)
    model = _ReferenceModel(units)
    live: dict[int, int] = {}  # offset -> requested size
    for _ in range(3000):
        if live and rng.random() < 0.45:
            off = rng.choice(list(live))
            del live[off]
            start = off // A
            length = model.blocks.pop(start)
            assert alloc.free(off) == length * A
            model.units[start : start + length] = [False] * length
        else:
            # Mostly small requests with the odd large one, to fragment and then exhaust.
            size = rng.choice([0, 1, A - 1, A, A + 1, 3 * A, rng.randrange(0, 40 * A)])
            need = max(1, -(-size // A))
            expected = model.best_fit(need)
            off = alloc.allocate(size)
            if expected is None:
                assert off is None
                continue
            assert off == expected * A
            assert not any(model.units[expected : expected + need])  # no overlap
            model.units[expected : expected + need] = [True] * need
            model.blocks[expected] = need
            live[off] = size
        used_units = sum(model.units)
        assert alloc.used == used_units * A
        assert alloc.free_bytes == (units - used_units) * A
        assert alloc.num_allocations == len(live)
        runs = model.free_runs()
        assert alloc.free_blocks() == [(s * A, n * A) for s, n in runs]
        assert alloc.largest_free() == max((n for _, n in runs), default=0) * A
    for off in list(live):
        alloc.free(off)
    assert alloc.used == 0
    assert alloc.free_blocks() == [(0, units * A)]


def test_many_allocations_stay_fast() -> None:
    # 100,000 objects is the design point; a linear scan per call would take minutes here.
    alloc = ArenaAllocator(200_000 * A)
    rng = random.Random(1)
    offsets = [alloc.allocate(rng.randrange(1, 2 * A)) for _ in range(100_000)]
    assert None not in offsets
    rng.shuffle(offsets)
    for off in offsets[::2]:
        alloc.free(off)
    for _ in range(50_000):
        assert alloc.allocate(A) is not None
    for off in offsets[1::2]:
        alloc.free(off)
    assert alloc.num_allocations == 50_000
