"""The read pins a process keeps on shared-memory objects: a pin whose last view is gone is
held a moment for the next get, then given back; never kept past the process's last
reference, a full store, or the idle bound."""

from __future__ import annotations

from ember.core_worker.plasma_pins import PlasmaPins

A, B, C = b"a" * 20, b"b" * 20, b"c" * 20


class Harness:
    def __init__(self, max_idle: int = 8) -> None:
        self.now = 100.0
        self.released: list[tuple[bytes, int]] = []
        self.timers: list[tuple[float, object]] = []
        self.pins = PlasmaPins(
            lambda oid, off: self.released.append((oid, off)),
            lambda delay, fn: self.timers.append((self.now + delay, fn)),
            hold_s=1.0,
            max_idle=max_idle,
            clock=lambda: self.now,
        )

    def advance(self, seconds: float) -> None:
        """Moves the clock and runs the timers that came due, as the I/O loop would."""
        self.now += seconds
        due = [t for t in self.timers if t[0] <= self.now]
        self.timers = [t for t in self.timers if t[0] > self.now]
        for _, fn in due:
            fn()


def test_a_held_pin_serves_the_next_get_then_goes_after_the_hold():
    h = Harness()
    p = h.pins
    assert p.acquire(A) is None  # not held: the caller asks the raylet
    p.add(A, 4096, 1000)
    p.release_view(A)
    assert h.released == [] and p.held() == 1  # held, idle
    assert p.acquire(A) == (4096, 1000)  # the next get: no raylet call
    assert p.views() == {A: (1, 1000)}
    p.release_view(A)
    h.advance(0.5)
    assert h.released == []
    h.advance(0.6)  # 1.1 s idle
    assert h.released == [(A, 4096)] and p.held() == 0 and p.views() == {}
    assert (p.hits, p.misses) == (1, 1)


def test_a_pin_in_use_is_never_released_and_its_idle_time_restarts():
    h = Harness()
    p = h.pins
    p.add(A, 0, 10)
    p.release_view(A)
    h.advance(0.9)
    p.acquire(A)  # in use again just before its hold ended
    h.advance(5)
    assert h.released == []  # a live view: never given back
    p.release_view(A)
    h.advance(0.5)
    assert h.released == []
    h.advance(0.6)
    assert h.released == [(A, 0)]


def test_forget_releases_an_idle_pin_at_once_and_a_used_one_at_its_last_view():
    h = Harness()
    p = h.pins
    p.add(A, 0, 10)
    p.release_view(A)
    p.forget(A)  # the process dropped its last ObjectRef
    assert h.released == [(A, 0)]
    p.add(B, 64, 10)
    p.forget(B)  # a value still lives: the pin stays while it does
    assert h.released == [(A, 0)]
    p.release_view(B)  # and goes with it, not held
    assert h.released == [(A, 0), (B, 64)] and p.held() == 0


def test_idle_pins_are_bounded_oldest_first_and_a_full_store_takes_them_all():
    h = Harness(max_idle=2)
    p = h.pins
    for i, oid in enumerate((A, B, C)):
        p.add(oid, i, 1)
        p.release_view(oid)
    assert h.released == [(A, 0)]  # the third idle pin pushed out the oldest
    assert p.release_idle() == 2
    assert sorted(h.released) == [(A, 0), (B, 1), (C, 2)] and p.held() == 0


def test_a_second_pin_of_a_held_object_is_given_back():
    h = Harness()
    p = h.pins
    p.add(A, 0, 10)
    p.add(A, 0, 10)  # two threads both missed and both pinned
    assert h.released == [(A, 0)] and p.views() == {A: (2, 10)}
    p.release_view(A)
    p.release_view(A)
    h.advance(1.1)
    assert h.released == [(A, 0), (A, 0)]


def test_a_pin_granted_ahead_is_used_by_the_next_get_or_given_back():
    h = Harness()
    p = h.pins
    p.add_idle(A, 0, 10)  # pinned in a batch, before its view is made
    p.add_idle(B, 64, 10)
    assert p.holds(A) and p.views() == {}
    assert p.acquire(A) == (0, 10)  # the get that follows maps it
    h.advance(1.1)
    assert h.released == [(B, 64)]  # B's view never came: given back after the hold
    p.release_view(A)
    h.advance(1.1)
    assert h.released == [(B, 64), (A, 0)]


def test_a_pin_on_an_object_not_referenced_here_goes_with_its_last_view():
    h = Harness()
    p = h.pins
    p.add(A, 0, 10, referenced=False)  # e.g. a task's argument: no forget will come
    assert p.acquire(A) == (0, 10)
    p.release_view(A)
    p.release_view(A)
    assert h.released == [(A, 0)] and p.held() == 0
