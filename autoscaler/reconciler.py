"""One autoscaler tick: read the cluster, move every instance along its lifecycle
(``instance.py``), decide (``scheduler.schedule``), act on the provider and the GCS, and keep
the instance table and the status record in the GCS's KV.

Per tick:
1. Provider nodes not in the table are matched to a launch in flight by their
   ``ember-instance-id`` tag, or adopted: a restarted autoscaler forgets no node.
2. Each instance advances: a joining node that registered is running (its node's
   ``ember.io/provider-node-id`` label matches); one silent past the join timeout is
   terminated and counted failed, and its type backs off; a node gone from the provider is
   ended; a draining node is terminated once its raylet reports no lease and no primary copy.
3. The scheduler decides on the nodes that can take work (draining ones cannot) and the
   launches in flight (requested, launching, joining), leaving types in backoff out.
4. Launches are written to the KV *before* the provider is asked, so a monitor killed
   mid-launch finds the launch on restart and its node by tag, never launching it twice.
5. An idle node past its timeout is drained (``drain_node`` in the GCS: no new leases),
   unless it holds primary copies of objects still referenced: then it is kept, and says so.

The autoscaler never terminates a node with running work: only a drained node whose raylet
answers "no leases" goes, or one the cluster already lost.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections import deque
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from ember.autoscaler.backoff import Backoff
from ember.autoscaler.demand import (
    IdleClock,
    demand_from_cluster_info,
    nodes_from_cluster_info,
    reported_before_newest_change,
)
from ember.autoscaler.instance import (
    ENDED_STATES,
    PENDING_STATES,
    Instance,
    InstanceState,
    from_record,
    to_record,
)
from ember.autoscaler.node_provider import (
    NODE_KIND_WORKER,
    TAG_CLUSTER_NAME,
    TAG_INSTANCE_ID,
    TAG_NODE_KIND,
    TAG_USER_NODE_TYPE,
    NodeProvider,
)
from ember.autoscaler.scheduler import Decision, idle_timeout_s, schedule
from ember.autoscaler.status import (
    ENDED_KEPT_S,
    MAX_DECISIONS,
    STATUS_KEY,
    build_status,
    encode,
)

PROVIDER_NODE_LABEL = "ember.io/provider-node-id"
STATE_KEY = b"instances"  # the instance table, in the ``autoscaler`` KV namespace
STATE_VERSION = 1
JOIN_TIMEOUT_S = 300.0  # a launched node that has not registered by then is failed
# At most this many create_node calls at once, for a provider that takes them in parallel.
MAX_PARALLEL_LAUNCHES = 8
# How long launches wait for every node to report its queue again after another node joined
# or took work (a node that stopped reporting, or a cluster whose work moves all the time,
# must not hold them for good).
SETTLE_AFTER_CHANGE_S = 3.0
log = logging.getLogger("ember.autoscaler")
S = InstanceState


class ClusterSide(Protocol):
    """What the reconciler asks of the GCS besides reading ``cluster_info``."""

    def drain_node(self, node_id: str, reason: str, draining: bool) -> dict[str, Any]:
        """Starts (or ends) draining the node; its raylet's ``{"leases", "num_primary"}``."""

    def put(self, key: bytes, value: bytes) -> None:
        """Writes ``value`` at ``key`` in the ``autoscaler`` KV namespace."""


class Reconciler:
    def __init__(
        self,
        config: Mapping[str, Any],
        provider: NodeProvider,
        side: ClusterSide | None = None,
        *,
        join_timeout_s: float = JOIN_TIMEOUT_S,
        backoff: Backoff | None = None,
        saved: bytes | None = None,
    ) -> None:
        """``saved``: the instance table a previous monitor left in the KV."""
        self.config = config
        self.provider = provider
        self.side = side
        self.join_timeout_s = join_timeout_s
        self.backoff = backoff or Backoff()
        self.clock = IdleClock()
        self.instances: dict[str, Instance] = {}
        self.decisions: deque[dict[str, Any]] = deque(maxlen=MAX_DECISIONS)
        self.counters = {"started": 0, "stopped": 0, "failed_create": 0, "failed_join": 0}
        self.infeasible: dict[tuple, dict[str, Any]] = {}  # shape key -> row, while it waits
        self.reported: set[tuple] = set()  # infeasible shapes already reported, once each
        self.last_status: dict[str, Any] = {}
        # The next moment (wall time) an idle node reaches its timeout, or None: the monitor
        # ticks then rather than up to a tick later.
        self.next_idle_due: float | None = None
        self._persisted = b""
        self._held_since: float | None = None  # launches held for fresh queue reports
        self._stopping: list[Instance] = []  # this tick's stops, for _stop_together
        self._inputs: tuple[Mapping[str, Any], Sequence[Mapping[str, float]]] = ({}, ())
        if saved:
            self._restore(saved)

    # -- persistence ------------------------------------------------------------------------
    def _restore(self, saved: bytes) -> None:
        try:
            state = json.loads(saved)
        except ValueError:
            log.warning("the saved instance table is unreadable: starting afresh")
            return
        for rec in state.get("instances") or ():
            inst = from_record(rec)
            self.instances[inst.instance_id] = inst
        self.counters.update(state.get("counters") or {})
        self.decisions.extend(state.get("decisions") or ())
        self.backoff.restore(state.get("backoff") or {})
        self.reported = {tuple(map(tuple, k)) for k in state.get("reported") or ()}
        log.info("restored %d instances from the GCS", len(self.instances))

    def state_record(self) -> bytes:
        return json.dumps(
            {
                "version": STATE_VERSION,
                "instances": [to_record(i) for i in self.instances.values()],
                "counters": self.counters,
                "decisions": list(self.decisions),
                "backoff": self.backoff.to_record(),
                "reported": sorted(self.reported),
            }
        ).encode()

    def _persist(self) -> None:
        if self.side is None:
            return
        record = self.state_record()
        if record != self._persisted:  # an unchanged table is not written again
            self.side.put(STATE_KEY, record)
            self._persisted = record

    def _decide(
        self,
        now: float,
        action: str,
        node_type: str,
        instance_id: str | None,
        reason: str,
        count: int = 1,
    ) -> None:
        log.info("%s %d x %s (%s): %s", action, count, node_type, instance_id or "-", reason)
        self.decisions.append(
            {
                "time": now,
                "action": action,
                "node_type": node_type,
                "instance_id": instance_id,
                "count": count,
                "reason": reason,
            }
        )

    # -- the tick ---------------------------------------------------------------------------
    def tick(
        self, info: Mapping[str, Any], now: float, requested: Sequence[Mapping[str, float]] = ()
    ) -> Decision:
        """Reads ``info`` (the GCS's cluster_info) and ``requested`` (request_resources'
        bundles), moves the instances, launches, drains and terminates; the decision."""
        self._inputs = (info, requested)
        mine = {TAG_CLUSTER_NAME: self.config["cluster_name"]}
        provider_ids = set(self.provider.non_terminated_nodes(mine))
        joined: dict[str, Mapping[str, Any]] = {}  # provider node id -> its alive Ember node
        for node in info.get("nodes") or ():
            pid = (node.get("labels") or {}).get(PROVIDER_NODE_LABEL)
            if node.get("state") == "ALIVE" and pid:
                joined[pid] = node
        self._adopt(provider_ids, now)
        for inst in list(self.instances.values()):
            self._advance(inst, provider_ids, joined, now)

        views = nodes_from_cluster_info(info, self.config["head_node_type"], self.clock, now)
        draining = {i.node_id for i in self.instances.values() if i.state is S.DRAINING}
        views = [v for v in views if v.node_id not in draining]  # no new work goes there
        seen = {v.node_id for v in views}
        pending: dict[str, int] = {}
        leaving: dict[str, int] = {}
        for inst in self.instances.values():
            if inst.state in PENDING_STATES:
                pending[inst.node_type] = pending.get(inst.node_type, 0) + 1
            elif inst.state is S.DRAINING or (
                inst.state is S.TERMINATING and inst.node_id not in seen
            ):
                # Not in ``views`` but still held: counted against max_workers.
                leaving[inst.node_type] = leaving.get(inst.node_type, 0) + 1
        demand = demand_from_cluster_info(info, requested)
        blocked = self.backoff.blocked(now)
        decision = schedule(
            self.config, views, demand, now, pending, unavailable=blocked, leaving=leaving
        )
        self.next_idle_due = min(
            (
                due
                for v in views
                if v.idle_since is not None and not v.is_head
                if (due := v.idle_since + idle_timeout_s(self.config, v.node_type)) > now
            ),
            default=None,
        )
        self._note_infeasible(decision, demand, now)
        self._hold_on_stale_demand(decision, info, now)
        if decision.launch:
            log.info(
                "launching %s; saw %s, in flight %s, waiting %s",
                decision.launch,
                _seen_nodes(info),
                pending,
                [dict(s) for s in demand.shapes],
            )
        for node_type, count in decision.launch.items():
            self._launch(node_type, count, decision.reasons.get(node_type, []), now)
        self._drain_idle(decision, joined, now)
        self._stop_together(now)
        self._forget_ended(now)
        self._persist()
        self._publish(now)
        return decision

    def _publish(self, now: float) -> None:
        """Builds the status record and (with a cluster side) writes it to the KV, where
        ``ember status`` and the dashboard read it."""
        info, requested = self._inputs
        self.last_status = build_status(
            config=self.config,
            instances=self.instances.values(),
            info=info,
            requested=requested,
            infeasible=list(self.infeasible.values()),
            decisions=list(self.decisions),
            counters=self.counters,
            backoff=self.backoff.to_record(),
            idle_since=self.clock.since_map(),
            now=now,
        )
        if self.side is not None:
            self.side.put(STATUS_KEY, encode(self.last_status))

    def _hold_on_stale_demand(
        self, decision: Decision, info: Mapping[str, Any], now: float
    ) -> None:
        """No launch this tick while a node's queue report predates the newest join or
        resources taken elsewhere (see ``reported_before_newest_change``), for at most
        SETTLE_AFTER_CHANGE_S."""
        if not decision.launch or not reported_before_newest_change(info):
            self._held_since = None
            return
        if self._held_since is None:
            self._held_since = now
        if now - self._held_since < SETTLE_AFTER_CHANGE_S:
            log.debug("launches %s held: a queue report predates a change", decision.launch)
            decision.launch = {}

    def _adopt(self, provider_ids: set[str], now: float) -> None:
        """Matches provider nodes the table does not hold to a launch in flight (by tag), or
        takes them in: a node made by a monitor that died before recording it."""
        known = {i.provider_node_id for i in self.instances.values() if i.provider_node_id}
        for pid in sorted(provider_ids - known):
            tags = self.provider.node_tags(pid)
            inst = self.instances.get(tags.get(TAG_INSTANCE_ID, ""))
            if inst is None or inst.state is not S.LAUNCHING:
                node_type = tags.get(TAG_USER_NODE_TYPE, "")
                if node_type not in self.config["available_node_types"]:
                    continue  # not a worker type of this config: not ours to manage
                iid = f"adopted-{pid}"
                inst = Instance.requested(iid, node_type, now)
                inst.fire("launch", now)
                inst.note = "found at the provider, not in the table: taken in"
                self.instances[iid] = inst
            inst.provider_node_id = pid
            inst.ip = self._ip(pid)
            inst.fire("created", now)

    def _ip(self, pid: str) -> str | None:
        try:
            return self.provider.internal_ip(pid)
        except Exception:  # a provider that does not know it yet: asked again on join
            return None

    def _advance(
        self,
        inst: Instance,
        provider_ids: set[str],
        joined: Mapping[str, Mapping[str, Any]],
        now: float,
    ) -> None:
        state, pid = inst.state, inst.provider_node_id
        if state is S.REQUESTED:  # a monitor stopped before asking: the demand is re-read
            inst.fire("cancel", now)
        elif state is S.LAUNCHING:  # a monitor stopped mid-launch and no node carries its tag
            inst.fire("launch_failed", now, "the autoscaler stopped before the node was made")
        elif state is S.JOINING:
            if pid in joined:
                inst.fire("joined", now)
                inst.node_id = _hex(joined[pid]["node_id"])
                inst.ip = inst.ip or joined[pid].get("node_ip")
                self.backoff.succeeded(inst.node_type)
            elif pid not in provider_ids:
                inst.fire("provider_lost", now, "the provider lost it before it joined")
                self._failed(inst, now)
            elif now - inst.since > self.join_timeout_s:
                why = f"did not join the cluster within {self.join_timeout_s:g} s"
                inst.fire("join_timeout", now, why)
                self.counters["failed_join"] += 1
                self._failed(inst, now)
                self._terminate(inst, now)
        elif state in (S.RUNNING, S.DRAINING):
            if pid not in provider_ids:
                inst.fire("provider_lost", now)
                inst.note = "the provider no longer lists it"
                self.counters["stopped"] += 1
            elif pid not in joined:  # its Ember node died: give the machine back
                inst.fire("terminate", now)
                inst.note = "its node left the cluster"
                self._terminate(inst, now)
            elif state is S.DRAINING:
                self._check_drain(inst, now)
        elif state is S.TERMINATING:
            if pid not in provider_ids:
                if inst.failure:  # a node that never joined: a failure, counted as such
                    inst.fire("cleaned_up_after_failure", now)
                else:
                    inst.fire("terminated", now)
                    self.counters["stopped"] += 1
            else:
                self._terminate(inst, now)

    def _failed(self, inst: Instance, now: float) -> None:
        delay = self.backoff.failed(inst.node_type, now)
        self._decide(now, "failed", inst.node_type, inst.instance_id, inst.failure or "")
        failures = self.backoff.failures[inst.node_type]
        self._decide(
            now,
            "backoff",
            inst.node_type,
            None,
            f"{failures} failure(s) in a row: no launch of this type for {delay:g} s",
        )

    def _terminate(self, inst: Instance, now: float) -> None:
        """The node is stopped at the tick's end, with the tick's other stops
        (``_stop_together``); a refusal is asked again next tick."""
        self._stopping.append(inst)

    def _stop_together(self, now: float) -> None:
        """The tick's stops in one ``terminate_nodes`` call: a provider that can stops them
        in one pass (fake_multinode: twenty ``ember stop`` runs, one after another, were most
        of the way down)."""
        stopping, self._stopping = self._stopping, []
        if not stopping:
            return
        ids = [inst.provider_node_id or "" for inst in stopping]
        try:
            errors = self.provider.terminate_nodes(ids) or {}
        except Exception as e:  # the whole call failed: every one is asked again
            errors = dict.fromkeys(ids, e)
        for inst, node_id in zip(stopping, ids, strict=True):
            error = errors.get(node_id)
            if isinstance(error, Exception):
                inst.note = f"terminate_node failed, asked again: {error}"[:500]
                inst.fire("retry", now)
                log.warning("terminate %s failed: %s", inst.instance_id, error)

    def _check_drain(self, inst: Instance, now: float) -> None:
        """A draining node goes once its raylet has no lease and holds no primary copy;
        a node left holding primary copies (a task's result) is kept, running again."""
        reply = self._drain_call(inst, True, "idle")
        if reply is None:
            return
        leases, primary = int(reply.get("leases", 0)), int(reply.get("num_primary", 0))
        if leases:
            inst.note = f"draining: waiting for {leases} lease(s) to finish"
        elif primary:
            self._keep(inst, primary, now)
        else:
            inst.fire("drained", now)
            inst.note = None
            self._decide(now, "terminate", inst.node_type, inst.instance_id, "drained")
            self._terminate(inst, now)

    def _keep(self, inst: Instance, primary: int, now: float) -> None:
        inst.fire("work_arrived", now)
        self._drain_call(inst, False, "kept")
        note = _kept_note(primary)
        if inst.note != note:
            self._decide(now, "drain", inst.node_type, inst.instance_id, note)
        inst.note = note

    def _drain_call(self, inst: Instance, draining: bool, reason: str) -> dict | None:
        if self.side is None or inst.node_id is None:
            return {}
        try:
            return self.side.drain_node(inst.node_id, reason, draining)
        except Exception as e:  # the GCS restarting: asked again next tick
            inst.note = f"drain_node failed, asked again: {e}"[:500]
            return None

    def _drain_idle(
        self, decision: Decision, joined: Mapping[str, Mapping[str, Any]], now: float
    ) -> None:
        by_node = {i.node_id: i for i in self.instances.values() if i.state is S.RUNNING}
        for t in decision.terminate:
            inst = by_node.get(t.node_id)
            if inst is None:  # not a node this autoscaler made: never ours to stop
                continue
            node = joined.get(inst.provider_node_id or "") or {}
            primary = int((node.get("store_stats") or {}).get("num_primary", 0))
            if primary:  # its objects would be lost with it
                note = _kept_note(primary)
                if inst.note != note:
                    self._decide(now, "drain", inst.node_type, inst.instance_id, note)
                inst.note = note
                continue
            inst.fire("idle_timeout", now)
            inst.note = "draining: no new leases"
            self._decide(now, "drain", t.node_type, inst.instance_id, t.reason)
            reply = self._drain_call(inst, True, t.reason)
            if reply is not None and not reply.get("leases") and not reply.get("num_primary"):
                self._check_drain(inst, now)

    def _launch(self, node_type: str, count: int, reasons: list[str], now: float) -> None:
        spec = self.config["available_node_types"][node_type]
        base = {
            TAG_CLUSTER_NAME: self.config["cluster_name"],
            TAG_NODE_KIND: NODE_KIND_WORKER,
            TAG_USER_NODE_TYPE: node_type,
        }
        why = "; ".join(sorted(set(reasons))) or "demand"
        self._decide(now, "launch", node_type, None, why, count)

        def create(inst: Instance) -> dict[str, Any]:
            tags = {**base, TAG_INSTANCE_ID: inst.instance_id}
            return self.provider.create_node_with_resources_and_labels(
                spec["node_config"], tags, 1, spec["resources"], spec.get("labels", {})
            )

        insts = [self._requested(node_type, now) for _ in range(count)]
        # A create can take minutes (an SSH host's setup commands): the decision and the
        # pending instances are shown while it runs, not after.
        self._publish(now)
        if not self.provider.launches_in_parallel:
            for i, inst in enumerate(insts):
                try:
                    made = create(inst)
                except Exception as e:
                    self._launch_failed(inst, e, backoff=True)
                    for rest in insts[i + 1 :]:  # not asked for: they wait for the backoff
                        del self.instances[rest.instance_id]
                    self._persist()
                    break
                self._created(inst, made)
            return
        with ThreadPoolExecutor(min(count, MAX_PARALLEL_LAUNCHES), "launch") as pool:
            futures = [pool.submit(create, inst) for inst in insts]
        failed = False
        for inst, future in zip(insts, futures, strict=True):
            try:
                made = future.result()
            except Exception as e:
                # One burst's failures are one failure for the backoff, not one each.
                self._launch_failed(inst, e, backoff=not failed)
                failed = True
                continue
            self._created(inst, made)

    def _requested(self, node_type: str, now: float) -> Instance:
        inst = Instance.requested(f"i-{uuid.uuid4().hex[:12]}", node_type, now)
        self.instances[inst.instance_id] = inst
        inst.fire("launch", now)
        self._persist()  # before the provider is asked: see the module's docstring
        return inst

    def _launch_failed(self, inst: Instance, error: Exception, *, backoff: bool) -> None:
        inst.fire("launch_failed", time.time(), f"{error}"[-1000:])
        self.counters["failed_create"] += 1
        if backoff:
            self._failed(inst, time.time())
        else:
            self._decide(
                time.time(), "failed", inst.node_type, inst.instance_id, inst.failure or ""
            )

    def _created(self, inst: Instance, made: dict[str, Any]) -> None:
        (pid,) = made
        inst.provider_node_id = pid
        inst.ip = self._ip(pid)
        inst.fire("created", time.time())
        self.counters["started"] += 1

    def _note_infeasible(self, decision: Decision, demand: Any, now: float) -> None:
        """Infeasible shapes while they wait, each reported (a decision, a warning) once."""
        every = [*demand.shapes, *(b for g in demand.placement_groups for b in g.bundles)]
        current: dict[tuple, dict[str, Any]] = {}
        for shape in decision.infeasible:
            key = tuple(sorted(shape.items()))
            count = sum(1 for s in every if tuple(sorted(s.items())) == key) or 1
            since = self.infeasible.get(key, {}).get("since", now)
            current[key] = {"shape": dict(shape), "count": count, "since": since}
            if key not in self.reported:
                self.reported.add(key)
                log.warning("infeasible demand: no node type can hold %s", shape)
                self._decide(
                    now, "infeasible", "", None, f"no node type can hold {dict(shape)}", count
                )
        self.infeasible = current

    def _forget_ended(self, now: float) -> None:
        for iid, inst in list(self.instances.items()):
            if inst.state in ENDED_STATES and now - inst.since > ENDED_KEPT_S:
                del self.instances[iid]


def _kept_note(primary: int) -> str:
    copies = "copy" if primary == 1 else "copies"
    return f"kept: holds {primary} primary {copies} of objects still referenced"


def _hex(raw: Any) -> str:
    return raw.hex() if isinstance(raw, bytes) else str(raw)


def _seen_nodes(info: Mapping[str, Any]) -> list[str]:
    """Each alive node as the tick saw it, for the log line that explains a launch: its id's
    head, free of total CPUs, its queue and how old its report is."""
    out = []
    for n in info.get("nodes") or ():
        if n.get("state") != "ALIVE":
            continue
        node = _hex(n.get("node_id") or b"")[:8]
        free = (n.get("resources_available") or {}).get("CPU", 0)
        total = (n.get("resources_total") or {}).get("CPU", 0)
        queued = sum(int(d.get("count", 1)) for d in n.get("pending_demands") or ())
        out.append(
            f"{node} CPU {free}/{total} queued {queued} at {n.get('demands_at')}"
            f" taken {n.get('taken_at')}"
        )
    return out
