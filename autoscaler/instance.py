"""A worker node's life as the autoscaler sees it: from the decision to launch it to its end,
as one table of allowed moves (``ember.lifecycle``, as the GCS's actor machine), so a restarted
autoscaler reading its instances back knows what each may do next and nothing else happens.

    requested -> launching -> joining -> running -> draining -> terminating -> terminated
                     |            |         |          |  ^
                     v            v         +----------+--+ (work arrived: back to running)
                   failed   terminating -> failed (did not join in time: cleaned up, counted)

``Instance`` is a plain record plus its track; it does no I/O. The reconciler, which calls the
provider and the GCS, fires the events below and persists the records (``to_record``) in the
GCS's KV.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ember.lifecycle import Lifecycle, LifecycleState, Track


class InstanceState(LifecycleState):
    REQUESTED = "requested"  # decided; the provider has not been asked yet
    LAUNCHING = "launching"  # the provider was asked (create_node in flight)
    JOINING = "joining"  # the provider has it; its node has not registered with the GCS
    RUNNING = "running"  # registered: the scheduler places work there
    DRAINING = "draining"  # chosen for removal: no new leases, its running work finishes
    TERMINATING = "terminating"  # terminate_node asked; waiting for the provider to agree
    TERMINATED = "terminated"
    FAILED = "failed"  # never became a usable node (launch error, never joined)


_Q, _L, _J, _R, _D, _T, _X, _F = InstanceState

INSTANCE_LIFECYCLE: Lifecycle[InstanceState] = Lifecycle(
    "instance",
    {
        _Q: {
            "launch": _L,
            "cancel": _X,  # the demand went away before the provider was asked
        },
        _L: {
            "created": _J,  # the provider returned its node id
            "launch_failed": _F,  # the provider refused (quota, sbatch error, host down)
        },
        _J: {
            "joined": _R,
            # Not registered in time: terminate what the provider made, then count a failure.
            "join_timeout": _T,
            "provider_lost": _F,  # gone from the provider's list before it joined
        },
        _R: {
            "idle_timeout": _D,
            "terminate": _T,  # an operator's ``ember down``, or its node died in the GCS
            "provider_lost": _X,  # removed under us (a Slurm time limit): replaced if needed
        },
        _D: {
            "drained": _T,  # no work left on it
            "work_arrived": _R,  # it is needed again: keep it
            "terminate": _T,
            "provider_lost": _X,
        },
        _T: {
            "terminated": _X,  # the provider no longer lists it
            "retry": _T,  # terminate_node failed: asked again, with backoff
            "cleaned_up_after_failure": _F,  # a join_timeout node, now gone
        },
    },
)

# States that will become nodes, counted against max_workers so a tick never launches twice.
PENDING_STATES = frozenset({_Q, _L, _J})
# States whose node may hold work the scheduler must account for.
NODE_STATES = frozenset({_R, _D})
# Ended: kept in the table (and the status record) for a while, then forgotten.
ENDED_STATES = frozenset({_X, _F})


@dataclass
class Instance:
    """One worker node the autoscaler manages; ``history`` is (event, state, time) per move."""

    instance_id: str
    node_type: str
    provider_node_id: str | None = None
    node_id: str | None = None  # the Ember node id, once it joined
    ip: str | None = None
    failure: str | None = None  # why it failed, as the provider or the timeout said
    note: str | None = None  # why it is kept or what it waits for (a draining node's objects)
    history: list[tuple[str, InstanceState, float]] = field(default_factory=list)
    _track: Track[InstanceState] | None = field(default=None, repr=False)

    @classmethod
    def requested(cls, instance_id: str, node_type: str, now: float) -> Instance:
        inst = cls(instance_id, node_type)
        inst._track = INSTANCE_LIFECYCLE.track(instance_id, _Q)
        inst.history.append(("requested", _Q, now))
        return inst

    @property
    def state(self) -> InstanceState:
        assert self._track is not None
        return self._track.state

    @property
    def since(self) -> float:
        """When it entered its current state (for join and drain timeouts)."""
        return self.history[-1][2]

    def fire(self, event: str, now: float, failure: str | None = None) -> InstanceState:
        """Move by ``event`` (TransitionError if the table forbids it) and record when."""
        assert self._track is not None
        state = self._track.fire(event)
        self.history.append((event, state, now))
        if failure is not None:
            self.failure = failure
        return state


# Moves kept per instance in its persisted record: enough to explain its last states.
KEPT_HISTORY = 20


def to_record(inst: Instance) -> dict:
    """The instance as JSON-ready data, for the GCS KV (``Instance.from_record`` reads it)."""
    return {
        "instance_id": inst.instance_id,
        "node_type": inst.node_type,
        "state": inst.state.value,
        "provider_node_id": inst.provider_node_id,
        "node_id": inst.node_id,
        "ip": inst.ip,
        "failure": inst.failure,
        "note": inst.note,
        "history": [[e, s.value, t] for e, s, t in inst.history[-KEPT_HISTORY:]],
    }


def from_record(rec: dict) -> Instance:
    """An instance read back by a restarted autoscaler, in the state it was left in."""
    state = InstanceState(rec["state"])
    inst = Instance(
        str(rec["instance_id"]),
        str(rec["node_type"]),
        provider_node_id=rec.get("provider_node_id"),
        node_id=rec.get("node_id"),
        ip=rec.get("ip"),
        failure=rec.get("failure"),
        note=rec.get("note"),
        history=[(e, InstanceState(s), float(t)) for e, s, t in rec.get("history") or ()],
    )
    if not inst.history:
        inst.history.append(("restored", state, 0.0))
    inst._track = INSTANCE_LIFECYCLE.track(inst.instance_id, state)
    return inst
