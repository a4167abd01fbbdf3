"""Messages the GCS handles (``ember.gcs.server``, one per cluster, on the head node).

Senders: raylets (registration, heartbeats, worker deaths), core workers in drivers and
workers (jobs, actors, placement groups, the key-value store), and tools (the CLI, the
dashboard, tests). Ids are raw ``bytes``; "ActorInfo" is the dict of
``ActorInfo.public()`` in ``ember.gcs.server``, "NodeInfo" that of ``NodeInfo.public()``,
"ClusterView" the per-node resource view ``GcsServer.cluster_view()`` returns.
"""

from __future__ import annotations

from typing import Any

from ember.protocol.errors import Refused
from ember.protocol.messages.base import OMIT, Catalogue, Message

GCS = Catalogue("gcs", "ember.gcs.server.GcsServer")


class GcsMessage(Message):
    catalogue = GCS


class NoSuchActor(Refused):
    """A request named an actor the GCS has never registered."""


class NodeDeclaredDead(Refused):
    """A heartbeat's answer to a node the GCS has declared dead: it must rejoin as a new node
    (its work was already redone elsewhere)."""


# -- nodes ---------------------------------------------------------------------------------
class RegisterNode(GcsMessage):
    """A raylet joins the cluster (and rejoins after a GCS restart). A node id the GCS has
    declared dead is refused (NodeDeclaredDead): it must rejoin under a new id."""

    op = "register_node"
    sent_by = "raylet"
    reply = '{"ok": True, "view": ClusterView}'

    node_id: bytes
    address: str  # the raylet's unix: address
    tcp_address: str  # tcp:host:port, for other nodes and remote drivers
    data_address: str  # the object transfer listener ("" if none)
    node_ip: str
    resources: dict[str, float]
    session_dir: str
    arena_path: str
    object_store_memory: int
    hostname: str
    is_head: bool
    pid: int
    # (lease id, worker id, actor id) of the actor leases it holds, and {pg_id: [bundle
    # index]} of the bundles reserved on it: a GCS started again ends those it does not know.
    actor_leases: list[tuple[int, bytes, bytes]] = OMIT
    bundles: dict[bytes, list[int]] = OMIT


class Heartbeat(GcsMessage):
    """A raylet's periodic report; the reply carries the cluster view back."""

    op = "heartbeat"
    sent_by = "raylet, every heartbeat_interval"
    reply = '{"view": ClusterView}; raises NodeDeclaredDead for a node declared dead'

    node_id: bytes
    available: dict[str, float]
    total: dict[str, float] = OMIT
    pending_demands: list[dict] = OMIT  # resource shapes waiting on this node
    store_stats: dict[str, Any] = OMIT
    # Seconds since the node's last lease ended, None while it holds or queues work: the
    # autoscaler's idle timer starts there (the GCS keeps it as ``idle_since``).
    idle_for: float | None = OMIT


class UnregisterNode(GcsMessage):
    """A raylet says it is stopping (SIGTERM, ``ember stop``, a drained node removed): the
    GCS marks its node dead at once, with this reason, rather than when its connection
    closes, after its workers and agent have stopped."""

    op = "unregister_node"
    sent_by = "raylet"
    oneway = True

    node_id: bytes
    reason: str


class SubscribeNodeEvents(GcsMessage):
    """This connection wants ``node_added`` / ``node_dead`` (core workers in a cluster)."""

    op = "subscribe_node_events"
    sent_by = "core worker"
    oneway = True


class SetResource(GcsMessage):
    """Sets a custom resource's capacity on a node (``ember.experimental.set_resource``);
    forwarded to that node's raylet as its own ``set_resource``."""

    op = "set_resource"
    sent_by = "core worker (driver)"
    reply = '{"ok": True}; raises ValueError when the node is not alive'

    node_id: bytes
    name: str
    capacity: float


class DrainNode(GcsMessage):
    """Stops (``draining``, the default) or restarts new work going to a live node: no new
    task leases, actors or bundles are placed there while it drains; what runs there goes on.
    Forwarded to the node's raylet as ``drain``; the reply is the raylet's, so the caller (the
    autoscaler, before removing the node) sees at once whether work or objects remain."""

    op = "drain_node"
    sent_by = "autoscaler monitor, tools"
    reply = (
        '{"draining": bool, "leases": int, "queued": int, "num_primary": int}; raises '
        "ValueError when the node is not alive"
    )

    node_id: bytes
    reason: str = OMIT
    draining: bool = OMIT


class GetClusterView(GcsMessage):
    op = "get_cluster_view"
    sent_by = "raylet (after a reconnect or when a spillback target is unknown)"
    reply = "ClusterView"


class ListNodes(GcsMessage):
    op = "list_nodes"
    sent_by = "core worker, CLI, tests"
    reply = "list[NodeInfo]"


class ClusterInfo(GcsMessage):
    """What ``ember status`` and the dashboard show."""

    op = "cluster_info"
    sent_by = "CLI, dashboard, tests"
    reply = (
        '{"nodes": list[NodeInfo], "start_time": float, "pending_actors": list[dict], '
        '"placement_groups": list[dict], "dashboard_url": str, "demand_version": int}'
    )


class WaitDemand(GcsMessage):
    """Answers once new demand appeared (a node's queue that was empty is not, an actor or
    a placement group waits for room) since ``cluster_info`` said ``seen``, or after
    ``timeout`` seconds (at most 10): the autoscaler reacts to a burst at once instead of at
    its next tick."""

    op = "wait_demand"
    sent_by = "autoscaler monitor"
    reply = '{"demand_version": int}'

    seen: int
    timeout: float


class GetEvents(GcsMessage):
    """Cluster events (node and actor deaths), oldest first, bounded."""

    op = "get_events"
    sent_by = "dashboard"
    reply = 'list[{"time": float, "severity": str, "message": str}]'


class Ping(GcsMessage):
    op = "ping"
    sent_by = "CLI (is the GCS up?), tests"
    reply = '"pong"'


# -- jobs ----------------------------------------------------------------------------------
class RegisterJob(GcsMessage):
    op = "register_job"
    sent_by = "core worker (driver), at connect"
    reply = '{"ok": True}'

    job_id: bytes
    driver_worker_id: bytes
    driver_pid: int
    node_id: bytes
    namespace: str
    entrypoint: str
    # The Jobs API's submission id when a submitted job's entrypoint is the driver ('' else):
    # the dashboard's job manager links the submission to this job with it.
    submission_id: str
    metadata: dict[str, str] = OMIT  # init(job_config=JobConfig(metadata=...))


class JobFinished(GcsMessage):
    """A driver ends its job: the GCS kills the job's non-detached actors and tells every
    raylet (``job_finished`` there)."""

    op = "job_finished"
    sent_by = "core worker (driver), at shutdown"
    reply = '{"ok": True}'

    job_id: bytes


class ListJobs(GcsMessage):
    op = "list_jobs"
    sent_by = "tools"
    reply = (
        "list[dict] (the register_job bodies, with start_time, end_time, state; once "
        "finished, end_reason and finished_by_driver)"
    )


# -- actors --------------------------------------------------------------------------------
class CreateActor(GcsMessage):
    """Creates an actor: the GCS leases a worker for it (``lease_actor_worker`` on a raylet)
    and sends it the constructor (``create_actor`` on that worker)."""

    op = "create_actor"
    sent_by = "core worker (the actor's owner)"
    reply = '{"ok": True}; a named actor whose name is taken raises ValueError'
    body_is = "spec"

    spec: Any  # ember.core_worker.task_spec.TaskSpec, kind ACTOR_CREATION_TASK


class SubscribeActor(GcsMessage):
    """Send this connection ``actor_update`` for the actor now and on every state change."""

    op = "subscribe_actor"
    sent_by = "core worker (a handle's holder)"
    oneway = True

    actor_id: bytes


class UnsubscribeActor(GcsMessage):
    op = "unsubscribe_actor"
    sent_by = "core worker"
    oneway = True

    actor_id: bytes


class GetActorInfo(GcsMessage):
    op = "get_actor_info"
    sent_by = "tools; a core worker (was_current_actor_reconstructed)"
    reply = "ActorInfo | None"

    actor_id: bytes


class GetNamedActor(GcsMessage):
    """``ember.get_actor(name)``."""

    op = "get_named_actor"
    sent_by = "core worker"
    reply = "ActorInfo with methods, spec_owner, max_task_retries and max_pending_calls | None"

    name: str
    namespace: str = OMIT


class ListNamedActors(GcsMessage):
    op = "list_named_actors"
    sent_by = "core worker (ember.util.list_named_actors)"
    reply = 'list[{"name": str, "namespace": str}]'

    namespace: str = OMIT
    all_namespaces: bool = OMIT


class ListActors(GcsMessage):
    op = "list_actors"
    sent_by = "dashboard, tools"
    reply = "list[ActorInfo]"


class KillActor(GcsMessage):
    """Ends an actor: ``ember.kill`` (a request), or its last handle going away (one-way,
    ``graceful`` and ``only_if_not_detached``)."""

    op = "kill_actor"
    sent_by = "core worker, dashboard"
    reply = (
        "None: killed, or nothing to do (already dead; detached with only_if_not_detached); "
        "raises NoSuchActor"
    )

    actor_id: bytes
    no_restart: bool = OMIT
    reason: str = OMIT
    graceful: bool = OMIT  # let it finish the calls it has first
    only_if_not_detached: bool = OMIT


class ActorExited(GcsMessage):
    """An actor's worker is exiting on purpose (``exit_actor``, or told to)."""

    op = "actor_exited"
    sent_by = "core worker (the actor's own)"
    reply = '{"ok": True}'

    actor_id: bytes
    reason: str = OMIT


class WorkerDied(GcsMessage):
    """One of a raylet's workers exited; if it held an actor, the actor restarts or dies."""

    op = "worker_died"
    sent_by = "raylet; a host of shared-process actors, for one that crashed"
    oneway = True

    worker_id: bytes
    actor_id: bytes | None = OMIT
    reason: str = OMIT


class OwnersDied(GcsMessage):
    """Drivers or workers of a raylet's node are gone: every other raylet must free the
    objects they owned (the GCS forwards it as ``free_owned_objects``)."""

    op = "owners_died"
    sent_by = "raylet"
    oneway = True

    worker_ids: list[bytes]


# -- the key-value store -------------------------------------------------------------------
class KvPut(GcsMessage):
    op = "kv_put"
    sent_by = "dashboard, core worker, tools"
    reply = "bool (False: the key existed and overwrite was off)"

    key: bytes
    value: bytes
    namespace: str = OMIT
    overwrite: bool = OMIT


class KvGet(GcsMessage):
    op = "kv_get"
    sent_by = "CLI, dashboard agent, tests"
    reply = "bytes | None"

    key: bytes
    namespace: str = OMIT


class KvDel(GcsMessage):
    op = "kv_del"
    sent_by = "tools"
    reply = "bool (whether it was there)"

    key: bytes
    namespace: str = OMIT


class KvKeys(GcsMessage):
    op = "kv_keys"
    sent_by = "tools"
    reply = "list[bytes]"

    namespace: str = OMIT
    prefix: bytes = OMIT


class GetPackageChunk(GcsMessage):
    """A chunk (at most 4 MiB) of a job's uploaded package, from the head's copy
    (``ember.runtime_env_packages``); raises for a bad or unknown name."""

    op = "get_package_chunk"
    sent_by = "core worker (a job's working_dir / py_modules on another node)"
    reply = '{"data": bytes, "size": int (the whole package)}'

    name: str
    offset: int


class PutPackageChunk(GcsMessage):
    """A chunk of a package a driver uploads for a runtime_env's local working_dir or
    py_modules (``ember.runtime_env_packages.upload``), written under the head's session;
    the first answers ``{"exists": True}`` when the head has the package already."""

    op = "put_package_chunk"
    sent_by = "core worker (a driver's runtime_env with local directories)"
    reply = '{"exists": bool}'

    name: str
    offset: int
    data: bytes
    last: bool


# -- placement groups ----------------------------------------------------------------------
class CreatePlacementGroup(GcsMessage):
    """Reserves bundles of resources; placed asynchronously (``wait_placement_group``). A bad
    strategy or an empty bundle raises ValueError."""

    op = "create_placement_group"
    sent_by = "core worker (ember.util.placement_group)"
    reply = '{"ok": True} (usually sent one-way)'

    pg_id: bytes
    bundles: list[dict[str, float]]
    strategy: str  # PACK, SPREAD, STRICT_PACK or STRICT_SPREAD
    name: str
    job_id: bytes
    detached: bool


class RemovePlacementGroup(GcsMessage):
    op = "remove_placement_group"
    sent_by = "core worker"
    reply = "None (usually sent one-way); removing an unknown or removed group does nothing"

    pg_id: bytes


class WaitPlacementGroup(GcsMessage):
    op = "wait_placement_group"
    sent_by = "core worker (PlacementGroup.ready / wait)"
    reply = "bool (placed within timeout)"

    pg_id: bytes
    timeout: float | None = OMIT


class GetPlacementGroup(GcsMessage):
    op = "get_placement_group"
    sent_by = "core worker"
    reply = "dict (the group, with pg_id) | None"

    name: str = OMIT
    pg_id: bytes = OMIT


class ListPlacementGroups(GcsMessage):
    op = "list_placement_groups"
    sent_by = "core worker"
    reply = "list[dict]"
