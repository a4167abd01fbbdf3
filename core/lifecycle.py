"""Lifecycles as data: the states a thing can be in and the events that move it, declared in
one table per kind of thing (actors in the GCS, worker leases in the raylet, task attempts in
the owner), so a reader finds every legal move in one place and nothing else can happen.

Rules:
- A lifecycle's table is ``{state: {event: next state}}``; a move not in it raises
  ``TransitionError`` naming the thing, its state, the event and the moves that led there.
- A state with no row is terminal: every event there is an error.
- The table says nothing about I/O. A state machine (``handle(event) -> [instructions]``)
  uses a ``Track`` to move and returns what its I/O shell must do.

A track costs one dict lookup and one list append per move: the owner's task attempts run
it several times per task on the hot path.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from typing import Generic, TypeVar


class LifecycleState(Enum):
    """A base for state enums: members are singletons compared by identity, so identity
    hashing is exact, and it is C code, where ``Enum.__hash__`` is Python run on every table
    lookup (about a third of a move's cost)."""

    __hash__ = object.__hash__


S = TypeVar("S", bound=Enum)

HISTORY = 16  # moves a track remembers for the error it raises
_NO_MOVES: dict = {}  # a terminal state's row: no dict made per refused move


class TransitionError(RuntimeError):
    """An event that the lifecycle does not allow in the thing's current state."""

    def __init__(self, lifecycle: str, key: object, state: Enum, event: str, history: list):
        self.lifecycle = lifecycle
        self.key = key
        self.state = state
        self.event = event
        self.history = list(history)
        path = " -> ".join(f"{e}:{s.name}" for e, s in self.history) or "(no moves)"
        super().__init__(
            f"{lifecycle} {key}: event {event!r} is not allowed in state {state.name}; "
            f"its last moves: {path}"
        )


class Lifecycle(Generic[S]):
    """The declared moves of one kind of thing."""

    def __init__(self, name: str, table: Mapping[S, Mapping[str, S]]) -> None:
        self.name = name
        # {state: {event: next state}}; states without a row are terminal.
        self.table: dict[S, dict[str, S]] = {s: dict(moves) for s, moves in table.items()}

    def allows(self, state: S, event: str) -> bool:
        return event in self.table.get(state, ())

    def events(self) -> set[str]:
        return {e for moves in self.table.values() for e in moves}

    def terminal(self) -> set[S]:
        """States no event leaves."""
        reached = {s for moves in self.table.values() for s in moves.values()}
        return {s for s in reached | set(self.table) if not self.table.get(s)}

    def track(self, key: object, initial: S) -> Track[S]:
        return Track(self, key, initial)


class Track(Generic[S]):
    """One thing's place in its lifecycle, and the moves that brought it there."""

    __slots__ = ("lifecycle", "key", "state", "history")

    def __init__(self, lifecycle: Lifecycle[S], key: object, initial: S) -> None:
        self.lifecycle = lifecycle
        self.key = key
        self.state = initial
        self.history: list[tuple[str, S]] = [("created", initial)]

    def fire(self, event: str) -> S:
        """Moves on ``event``; raises ``TransitionError`` if the table has no such move."""
        nxt = self.lifecycle.table.get(self.state, _NO_MOVES).get(event)
        if nxt is None:
            raise TransitionError(self.lifecycle.name, self.key, self.state, event, self.history)
        self.state = nxt
        history = self.history
        history.append((event, nxt))
        if len(history) > 2 * HISTORY:
            del history[:-HISTORY]
        return nxt

    def can(self, event: str) -> bool:
        return event in self.lifecycle.table.get(self.state, _NO_MOVES)

    def __repr__(self) -> str:
        return f"<{self.lifecycle.name} {self.key} {self.state.name}>"
