"""The autoscaler's scheduler fed from a real cluster: queued tasks, a pending actor and a
pending placement group read from the GCS's cluster_info (what ``ember status`` prints) become
launch decisions; the nodes decided, once joined, run the work; idle past their timeout they are
chosen for termination. The provider that would launch them is a later step: the test starts
the nodes itself (``cluster.add_node``), labelled as a provider would."""

from __future__ import annotations

import os
import time

import ember
from ember.autoscaler.config import load_config
from ember.autoscaler.demand import (
    NODE_TYPE_LABEL,
    IdleClock,
    demand_from_cluster_info,
    nodes_from_cluster_info,
)
from ember.autoscaler.scheduler import schedule
from ember.cli.status import fetch
from ember.cluster_utils import Cluster
from ember.util.placement_group import placement_group
from ember_test_utils import REPO_ROOT, wait_until


def _info(c: Cluster) -> dict:
    return fetch(c.address, os.path.dirname(c.head_node.session_dir), c.token)


def test_demand_from_a_real_cluster_drives_launch_and_idle_termination(cluster: Cluster) -> None:
    config = load_config(REPO_ROOT / "examples" / "clusters" / "fake.yaml")
    config["available_node_types"]["cpu_worker"]["idle_timeout_s"] = 1
    cluster.connect()

    @ember.remote(num_cpus=1)
    def hold(seconds: float) -> str:
        time.sleep(seconds)
        return "done"

    @ember.remote(num_cpus=2)
    class Big:
        def ping(self) -> str:
            return "pong"

    refs = [hold.remote(3) for _ in range(3)]  # one runs on the head, two queue
    big = Big.remote()  # 2 CPUs: no node alive holds it
    pg = placement_group([{"CPU": 1}, {"CPU": 1}], strategy="STRICT_SPREAD")

    def cpus(d) -> list[float]:
        return sorted(s["CPU"] for s in d.shapes)

    def demand_seen() -> bool:
        # Polled until it settles: a queued task may be counted twice for a heartbeat (its
        # owner's backlog report and its lease request crossing), which a loaded machine
        # lets a reading catch.
        d = demand_from_cluster_info(_info(cluster))
        return cpus(d) == [1.0, 1.0, 2.0] and len(d.placement_groups) == 1

    wait_until(demand_seen, timeout=30, message="the GCS never reported the demand")
    info = _info(cluster)
    demand = demand_from_cluster_info(info)
    assert demand.placement_groups[0].strategy == "STRICT_SPREAD"
    assert [dict(b) for b in demand.placement_groups[0].bundles] == [{"CPU": 1.0}] * 2
    clock = IdleClock()
    nodes = nodes_from_cluster_info(info, "head", clock, time.time())
    assert [(n.node_type, n.is_head) for n in nodes] == [("head", True)]

    decision = schedule(config, nodes, demand, time.time())
    # Two CPU:2 workers for the spread group, whose free CPUs then take the 2-CPU actor and a
    # 1-CPU task; the second task gets a third worker (the head is full).
    assert decision.launch == {"cpu_worker": 3}
    assert decision.infeasible == [] and decision.terminate == []

    # The nodes decided join (as the provider would start them): all the work runs.
    joining = time.time()
    for _ in range(decision.launch["cpu_worker"]):
        cluster.add_node(num_cpus=2, labels={NODE_TYPE_LABEL: "cpu_worker"})
    ember.get(pg.ready(), timeout=60)
    assert ember.get(refs, timeout=60) == ["done"] * 3
    assert ember.get(big.ping.remote(), timeout=60) == "pong"
    ember.kill(big)
    ember.util.remove_placement_group(pg)

    # The workers idle past their 1 s timeout: all chosen (min_workers is 0), never the head.
    def terminations() -> list[str]:
        info = _info(cluster)
        nodes = nodes_from_cluster_info(info, "head", clock, time.time())
        d = schedule(config, nodes, demand_from_cluster_info(info), time.time())
        return sorted(t.node_type for t in d.terminate)

    wait_until(
        lambda: terminations() == ["cpu_worker"] * 3,
        timeout=30,
        message="the idle workers were never chosen for termination",
    )
    # Their raylets said since when they held no lease (the GCS's idle_since, on its clock):
    # after they joined, before now, and the autoscaler's idle clock started there.
    info = _info(cluster)
    workers = [n for n in info["nodes"] if n["state"] == "ALIVE" and not n["is_head"]]
    reported = sorted(n["idle_since"] for n in workers)
    assert len(reported) == 3 and joining - 1 < reported[0] <= reported[-1] < time.time()
    seen = nodes_from_cluster_info(info, "head", IdleClock(), time.time())
    assert sorted(n.idle_since for n in seen if not n.is_head) == reported


def test_new_demand_wakes_the_autoscalers_wait_at_once() -> None:
    """The monitor waits between ticks on the GCS's ``wait_demand``: a task queued on a head
    whose last heartbeat said its queue was empty makes the raylet beat at once, and the
    wait returns then, well within the monitor's 1 s tick (heartbeats here are 5 s apart:
    only the early beat can be that quick). Demand the GCS has heard of already wakes no
    one; an actor and a placement group that wait for room do."""
    import threading

    from ember.autoscaler.monitor import GcsLink
    from ember.cluster_address import find_gcs_address

    if ember.is_initialized():
        ember.shutdown()
    slow_beats = {"EMBER_HEARTBEAT_INTERVAL": "5", "EMBER_NODE_DEATH_TIMEOUT": "60"}
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 0}, env=slow_beats)
    c.connect()
    link = GcsLink(find_gcs_address(c.address), c.token)

    def woken_after(make_demand, deadline: float = 8.0) -> float:
        """Seconds from making the demand to the wait's return (or to its deadline)."""
        seen = link.cluster_info()[0]["demand_version"]
        returned: list[float] = []

        def wait() -> None:
            link.wait_demand(seen, time.monotonic() + deadline, lambda: False)
            returned.append(time.monotonic())

        waiter = threading.Thread(target=wait)
        waiter.start()
        time.sleep(0.3)  # the wait is at the GCS
        t0 = time.monotonic()
        made = make_demand()
        waiter.join(timeout=deadline + 10)
        assert returned, "the wait never returned"
        return returned[0] - t0, made

    @ember.remote(num_cpus=1)
    def needs_a_cpu() -> int:
        return 1

    @ember.remote(num_cpus=1)
    class NeedsACpu:
        pass

    try:
        took, task = woken_after(needs_a_cpu.remote)
        assert took < 1.0, f"a first queued task woke the wait after {took:.2f} s"
        took, more = woken_after(needs_a_cpu.remote, deadline=3.0)
        assert took >= 2.5, f"more of the same queue woke the wait ({took:.2f} s)"
        took, actor = woken_after(NeedsACpu.remote)
        assert took < 1.0, f"a waiting actor woke the wait after {took:.2f} s"
        took, pg = woken_after(lambda: placement_group([{"CPU": 1}]))
        assert took < 1.0, f"a waiting placement group woke the wait after {took:.2f} s"
        ember.util.remove_placement_group(pg)
        ember.kill(actor)
        ember.cancel(task)
        ember.cancel(more)
    finally:
        link.close()
        c.shutdown()
