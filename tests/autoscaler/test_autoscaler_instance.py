"""The instance lifecycle as a table: the declared paths happen, anything else is refused
with the path taken, and every state can still end."""

from __future__ import annotations

import pytest
from ember.autoscaler.instance import (
    INSTANCE_LIFECYCLE,
    NODE_STATES,
    PENDING_STATES,
    Instance,
    InstanceState,
)
from ember.lifecycle import TransitionError

S = InstanceState


@pytest.mark.parametrize(
    ("events", "end"),
    [
        (["launch", "created", "joined"], S.RUNNING),
        (["launch", "created", "joined", "idle_timeout", "drained", "terminated"], S.TERMINATED),
        (["launch", "created", "joined", "idle_timeout", "work_arrived"], S.RUNNING),
        (["launch", "launch_failed"], S.FAILED),
        (["launch", "created", "join_timeout", "retry", "cleaned_up_after_failure"], S.FAILED),
        (["launch", "created", "provider_lost"], S.FAILED),
        (["launch", "created", "joined", "provider_lost"], S.TERMINATED),
        (["launch", "created", "joined", "terminate", "terminated"], S.TERMINATED),
        (["cancel"], S.TERMINATED),
    ],
)
def test_declared_paths(events: list[str], end: InstanceState) -> None:
    inst = Instance.requested("i-1", "cpu", now=100.0)
    for t, event in enumerate(events, start=1):
        inst.fire(event, now=100.0 + t)
    assert inst.state is end
    assert [e for e, _, _ in inst.history] == ["requested", *events]
    assert inst.since == 100.0 + len(events)


@pytest.mark.parametrize(
    ("events", "refused"),
    [
        ([], "joined"),  # a node cannot join before it was launched
        (["launch"], "idle_timeout"),
        (["launch", "created", "joined"], "launch"),
        (["launch", "created", "joined", "idle_timeout"], "joined"),
        (["launch", "launch_failed"], "launch"),  # failed is terminal: a retry is a new instance
        (["cancel"], "launch"),
    ],
)
def test_undeclared_moves_are_refused(events: list[str], refused: str) -> None:
    inst = Instance.requested("i-2", "cpu", now=0.0)
    for event in events:
        inst.fire(event, now=1.0)
    before = inst.state
    with pytest.raises(TransitionError, match=f"instance i-2: event '{refused}' is not allowed"):
        inst.fire(refused, now=2.0)
    assert inst.state is before and len(inst.history) == len(events) + 1


def test_the_terminal_states_are_terminated_and_failed() -> None:
    assert INSTANCE_LIFECYCLE.terminal() == {S.TERMINATED, S.FAILED}


def test_every_state_is_reachable_and_can_end() -> None:
    table = INSTANCE_LIFECYCLE.table
    reached, frontier = {S.REQUESTED}, [S.REQUESTED]
    while frontier:
        for nxt in table.get(frontier.pop(), {}).values():
            if nxt not in reached:
                reached.add(nxt)
                frontier.append(nxt)
    assert reached == set(S)
    for state in S:
        ends, frontier = set(), [state]
        seen = {state}
        while frontier:
            s = frontier.pop()
            if s in INSTANCE_LIFECYCLE.terminal():
                ends.add(s)
            for nxt in table.get(s, {}).values():
                if nxt not in seen:
                    seen.add(nxt)
                    frontier.append(nxt)
        assert ends, f"{state.name} can never end"


def test_pending_and_node_states_split_the_live_ones() -> None:
    live = set(S) - INSTANCE_LIFECYCLE.terminal() - {S.TERMINATING}
    assert PENDING_STATES | NODE_STATES == live
    assert not PENDING_STATES & NODE_STATES


def test_a_failure_reason_is_kept() -> None:
    inst = Instance.requested("i-3", "gpu", now=0.0)
    inst.fire("launch", now=1.0)
    inst.fire("launch_failed", now=2.0, failure="sbatch: error: invalid partition")
    assert (inst.state, inst.failure) == (S.FAILED, "sbatch: error: invalid partition")
