"""One object's record in the raylet's object table, and the signals the table raises when
making room for a new object needs I/O first (spilling copies to disk, moving them in the
arena), which the raylet does off its event loop before trying again."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

# Internal readers: a copy being written to disk, read back or moved must stay where it is.
SPILLER = ("spill",)
RESTORER = ("restore",)
MOVER = ("move",)


@dataclass(slots=True, eq=False)
class Entry:
    # eq=False keeps identity hashing: entries are keys of the LRU and per-client indexes,
    # and two copies of one id can coexist (a deleted-but-pinned one and its re-creation).
    object_id: bytes
    offset: int  # -1: not in memory (spilled)
    size: int
    block: int
    creator: Hashable
    # (worker_id, address, node_id) from core workers; plain bytes in tests; None: unknown.
    owner: Any
    primary: bool
    created_at: float
    last_access: float
    sealed: bool = False
    deleted: bool = False
    pins: int = 0
    readers: dict[Hashable, int] = field(default_factory=dict)
    spill_path: str | None = None  # its copy on disk, once written
    # In memory but its bytes are not (yet) at ``offset``: being read back from disk, or
    # being moved there. Readers wait.
    busy: bool = False

    @property
    def evictable(self) -> bool:
        # A primary copy that is also on disk can leave memory like a cached copy.
        return (
            self.sealed
            and not self.pins
            and not self.deleted
            and self.offset >= 0
            and (not self.primary or self.spill_path is not None)
        )

    @property
    def spillable(self) -> bool:
        return (
            self.sealed
            and self.primary
            and not self.pins
            and not self.deleted
            and self.offset >= 0
            and self.spill_path is None
        )

    @property
    def movable(self) -> bool:
        """Nobody holds its offset: the raylet may copy it elsewhere in the arena."""
        return self.sealed and not self.pins and not self.deleted and self.offset >= 0


class SpillNeeded(Exception):
    """Room can be made only by spilling these primary copies first (then try again)."""

    def __init__(self, entries: list[Entry]) -> None:
        super().__init__(f"{len(entries)} objects must be spilled to make room")
        self.entries = entries


class MoveNeeded(Exception):
    """Room can be made by moving these copies (``(entry, old offset, new offset)``, already
    reserved) within the arena: copy the bytes in this order (a slide's ranges may overlap,
    new below old), then ``finish_moves``. ``reserved``: free blocks held meanwhile."""

    def __init__(
        self, moves: list[tuple[Entry, int, int]], reserved: list[int], slide: bool
    ) -> None:
        super().__init__(f"{len(moves)} objects must be moved to make room")
        self.moves = moves
        self.reserved = reserved
        self.slide = slide
