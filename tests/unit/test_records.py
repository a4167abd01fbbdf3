"""Plain records: slots, an __init__ with defaults written on first use, equality by fields."""

from __future__ import annotations

from typing import ClassVar

import pytest
from ember.records import Record, _first_init


class Point(Record):
    x: int
    y: int = 0
    kind: ClassVar[str] = "point"


class Labelled(Point):
    label: str = ""


def test_fields_defaults_and_slots() -> None:
    assert Point._fields == ("x", "y")
    assert Point(1) == Point(x=1, y=0) != Point(1, 2)
    with pytest.raises(AttributeError):
        Point(1).z = 3  # slots: no instance dict
    with pytest.raises(TypeError, match="missing 1 required positional argument: 'x'"):
        Point()


def test_init_is_written_on_first_use_only() -> None:
    class Fresh(Record):
        a: int

    assert Fresh.__init__ is _first_init
    assert Fresh(5).a == 5
    assert Fresh.__init__ is not _first_init
    assert Fresh(6).a == 6


def test_a_subclass_has_its_parents_fields_first() -> None:
    assert Labelled._fields == ("x", "y", "label")
    p = Labelled(1, 2, "a")
    assert (p.x, p.y, p.label) == (1, 2, "a")
    assert p != Point(1, 2)  # another type
    assert repr(p) == "Labelled(x=1, y=2, label='a')"


def test_records_are_unhashable_like_dataclasses() -> None:
    with pytest.raises(TypeError):
        hash(Point(1))
