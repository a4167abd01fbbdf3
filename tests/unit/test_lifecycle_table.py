"""The lifecycle table: declared moves happen, anything else raises with the path taken."""

from __future__ import annotations

from enum import Enum

import pytest
from ember.lifecycle import HISTORY, Lifecycle, TransitionError


class Light(Enum):
    OFF = 1
    ON = 2
    BROKEN = 3


LIGHT = Lifecycle(
    "light",
    {
        Light.OFF: {"switch": Light.ON, "smash": Light.BROKEN},
        Light.ON: {"switch": Light.OFF, "smash": Light.BROKEN},
    },
)


def test_declared_moves_happen() -> None:
    t = LIGHT.track("lamp", Light.OFF)
    assert t.fire("switch") is Light.ON
    assert t.fire("switch") is Light.OFF
    assert t.state is Light.OFF
    assert t.can("smash") and not t.can("repair")


def test_an_undeclared_move_raises_with_its_history() -> None:
    t = LIGHT.track("lamp", Light.OFF)
    t.fire("switch")
    t.fire("smash")
    with pytest.raises(TransitionError) as info:
        t.fire("switch")
    e = info.value
    assert (e.lifecycle, e.key, e.state, e.event) == ("light", "lamp", Light.BROKEN, "switch")
    assert [ev for ev, _ in e.history] == ["created", "switch", "smash"]
    assert "not allowed in state BROKEN" in str(e) and "switch:ON -> smash:BROKEN" in str(e)
    assert t.state is Light.BROKEN  # a refused event moves nothing


def test_terminal_states_and_events_are_read_from_the_table() -> None:
    assert LIGHT.terminal() == {Light.BROKEN}
    assert LIGHT.events() == {"switch", "smash"}
    assert LIGHT.allows(Light.ON, "smash") and not LIGHT.allows(Light.BROKEN, "smash")


def test_history_stays_bounded() -> None:
    t = LIGHT.track("lamp", Light.OFF)
    for _ in range(10 * HISTORY):
        t.fire("switch")
    assert HISTORY <= len(t.history) <= 2 * HISTORY + 1
