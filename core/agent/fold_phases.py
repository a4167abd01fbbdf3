"""Fewer task events for the same facts: an attempt's earlier phases folded into its end.

An owner records up to four events per task attempt (submitted, waiting for a node, sent to
a worker, ended) and two per actor call; its worker adds RUNNING. The owner flushes once a
second, so most attempts' phases and end arrive in one batch. The node's agent folds them
into one event as the batch arrives, each phase's time carried along: the stream to the
dashboard, the history journal and the dashboard's table (``dashboard/task_table.py``,
``FOLDED_TIMES``) each handle one event where they handled up to four, and the table reads
the same states and times.
"""

from __future__ import annotations

# An owner's states of a task before it ends, and the column of the dashboard's table each one's
# time goes to when it is folded into the end (``fold_phases``).
FOLDED_PHASES = {
    "PENDING_ARGS_AVAIL": "t_pending",
    "PENDING_NODE_ASSIGNMENT": "t_assign",
    "SUBMITTED_TO_WORKER": "t_scheduled",
}
_ENDS = frozenset({"FINISHED", "FAILED"})


def fold_phases(events: list[tuple]) -> list[tuple]:
    """The batch with each attempt's earlier phases folded into its end, when both are in
    it: one event where there were up to four (a task's submission, node assignment,
    dispatch and end; an actor call's submission and end), so the agent, the history journal
    and the dashboard's table each handle one. The end's ``extra`` gets every folded event's
    fields it lacks, and each one's time under ``FOLDED_PHASES``' key. Only phases of the
    attempt of the task's last end in the batch fold (a retried task's earlier attempt keeps
    its events).

    The agent runs it on each owner's batch as it arrives (the owner's I/O thread, which
    answers its calls, is spared it). It copies nothing: the batch was just decoded, so an
    end's ``extra`` is its own dict, completed in place; the folded events are only read."""
    ends: dict[bytes, int] = {}
    for i, event in enumerate(events):
        if event[1] in _ENDS:
            ends[event[0]] = i
    if not ends:
        return events
    end_of = ends.get
    phases = FOLDED_PHASES
    out: list[tuple] = []
    append = out.append
    for i, event in enumerate(events):
        if event[1] in phases:
            end = end_of(event[0], -1)
            if end > i:
                last = events[end]
                if last[3] == event[3]:
                    extra = last[4]
                    if extra is None:
                        extra = {}
                        events[end] = last = (last[0], last[1], last[2], last[3], extra)
                    more = event[4]
                    if more:
                        for k, v in more.items():
                            if k not in extra:
                                extra[k] = v
                    extra[phases[event[1]]] = event[2]
                    continue
        append(event)
    return out
