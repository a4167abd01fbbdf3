"""Choosing which objects to move out of the arena so that one new object fits.

Freeing the least recently used objects until an allocation succeeds ignores where they
sit: with mixed sizes it frees scattered blocks, none adjacent to another, and can throw out
most of the store before a large object finds a contiguous run (fragmentation). Here the
arena is seen as the run of blocks it is, in address order, and the cheapest *contiguous*
window of blocks that could be freed is chosen: free blocks cost nothing, cached secondary
copies (evicted: a later reader pulls them again) cost their size, primary copies (spilled
to disk first) twice their size; blocks that are pinned or still being written cannot move
and split the arena into separate runs. Ties go to the window whose newest member was used
longest ago, so with equal sizes this is plain LRU.

The same search plans compaction: with every unpinned copy MOVABLE (cost: its size, the bytes
copied), the window is the run to empty by moving its objects to free blocks elsewhere.

Pure: the store builds the segments and carries out the plan.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

FREE = 0
EVICTABLE = 1
SPILLABLE = 2
FIXED = 3

# MOVABLE: an unpinned copy that can be copied elsewhere in the arena (compaction).
MOVABLE = 4

_WEIGHT = {FREE: 0, EVICTABLE: 1, SPILLABLE: 2, MOVABLE: 1}


@dataclass(slots=True)
class Segment:
    """One block of the arena: ``offset``, ``size``, what freeing it takes, its LRU rank
    (higher is more recently used; 0 for free blocks) and the store's handle for it."""

    offset: int
    size: int
    kind: int
    rank: int = 0
    item: Any = None


def plan(segments: Sequence[Segment], need: int) -> list[Segment] | None:
    """The cheapest window of adjacent movable segments spanning at least ``need`` bytes,
    free blocks included; None if no window is big enough."""
    for window in windows(segments, need):
        return window
    return None


def windows(segments: Sequence[Segment], need: int) -> Iterator[list[Segment]]:
    """Every window worth considering, cheapest first: for each end, the shortest window of
    adjacent movable segments ending there that spans at least ``need`` bytes.

    ``segments`` must tile the arena in address order. Two pointers over each run of
    movable segments: O(n) windows for n segments, sorted by (cost, newest rank).
    """
    found: list[tuple[tuple[int, int], int, int]] = []  # (key, start, end)
    n = len(segments)
    i = 0
    while i < n:
        if segments[i].kind == FIXED:
            i += 1
            continue
        # [i, j) is a maximal run of movable segments.
        j = i
        while j < n and segments[j].kind != FIXED:
            j += 1
        left = i
        span = cost = 0
        for right in range(i, j):
            seg = segments[right]
            span += seg.size
            cost += _WEIGHT[seg.kind] * seg.size
            # Shrink from the left while the window still spans enough.
            while left < right and span - segments[left].size >= need:
                drop = segments[left]
                span -= drop.size
                cost -= _WEIGHT[drop.kind] * drop.size
                left += 1
            if span >= need:
                newest = max(s.rank for s in segments[left : right + 1])
                found.append(((cost, newest), left, right + 1))
        i = j
    found.sort(key=lambda f: f[0])
    for _key, start, end in found:
        yield list(segments[start:end])
