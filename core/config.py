"""Tunables, each overridable by an ``EMBER_<NAME>`` environment variable.

Read once at import; processes the node starts inherit the environment, so one setting
reaches every process of a local node.
"""

from __future__ import annotations

import logging
import os


def _env(name: str, default, cast=None):
    raw = os.environ.get("EMBER_" + name.upper())
    if raw is None:
        return default
    return (cast or type(default))(raw)


# Objects up to this size travel inside messages; larger ones go to shared memory.
max_direct_call_object_size: int = _env("max_direct_call_object_size", 100 * 1024)
# A get's read pin on a shared-memory object is held this long after its last view, so the
# next get of the object needs no raylet call (0: give pins back at once).
plasma_pin_hold_seconds: float = _env("plasma_pin_hold_seconds", 1.0)
# An idle leased worker is kept this long for the next task of its class (saves a round trip
# to the raylet per task in a sync loop); the raylet can take it back sooner.
lease_idle_seconds: float = _env("lease_idle_seconds", 0.05)
# Normal tasks a leased worker may have at once: 2 (or more) pushes a short task behind the
# running one, hiding the round trip (task_submitter's pipelining); 1 turns that off.
max_tasks_in_flight_per_worker: int = _env("max_tasks_in_flight_per_worker", 2)
# A new task whose class has an idle leased worker is pushed by the caller's own thread
# (task_submitter's direct submission: one wake-up of the I/O thread fewer per sync task);
# 0 hands every task to the I/O thread.
direct_task_submit: bool = _env(
    "direct_task_submit", True, lambda v: v.lower() not in ("0", "false", "no")
)
# A driver's sync actor calls and tasks to workers on its node: the calling thread reads its
# reply from its own connection to the worker (own_replies.py) instead of being woken by the
# I/O thread; 0 keeps every call on the main connection.
own_reply_channel: bool = _env(
    "own_reply_channel", True, lambda v: v.lower() not in ("0", "false", "no")
)
# The worker's side of such a channel: its executing thread reads the calls itself
# (served_channels.py) instead of being handed each by its I/O thread; 0: the I/O thread.
serve_on_thread: bool = _env(
    "serve_on_thread", True, lambda v: v.lower() not in ("0", "false", "no")
)
# Deadlines for start-up and control calls: every wait has one.
process_start_timeout: float = _env("process_start_timeout", 30.0)
gcs_rpc_timeout: float = _env("gcs_rpc_timeout", 30.0)
# Bounded event buffers (every buffer has a bound and counts what it dropped): how many task events a process keeps before dropping.
task_events_buffer_size: int = _env("task_events_buffer_size", 100_000)
# Fraction of system memory the object store takes when object_store_memory is not given.
object_store_memory_fraction: float = _env("object_store_memory_fraction", 0.3)
object_store_memory_cap: int = _env("object_store_memory_cap", 200 * 1024**3)
# Object spilling (Ray's): when the store's memory that cannot simply be dropped passes this
# fraction of its capacity, or an object cannot fit, the raylet writes primary copies that no
# process has mapped to files under the directory ("" = the session directory), at most
# object_spilling_max_bytes of them (0 = no fixed cap; the disk is still kept under
# local_fs_capacity_threshold full), in batches of up to object_spilling_batch_bytes.
# EMBER_AUTOMATIC_OBJECT_SPILLING_ENABLED=0 turns it off (a full store then raises).
automatic_object_spilling_enabled: bool = _env(
    "automatic_object_spilling_enabled", True, lambda v: v.lower() not in ("0", "false", "no")
)
object_spilling_threshold: float = _env("object_spilling_threshold", 0.8)
object_spilling_directory: str = _env("object_spilling_directory", "")
object_spilling_max_bytes: int = _env("object_spilling_max_bytes", 0)
object_spilling_batch_bytes: int = _env("object_spilling_batch_bytes", 100 * 1024 * 1024)
local_fs_capacity_threshold: float = _env("local_fs_capacity_threshold", 0.95)
# A create or restore that finds no room while readers pin objects waits up to this long for
# pins to be released before it raises ObjectStoreFullError (Ray's oom_grace_period_s): a
# process keeps a read pin about a second past its last view, for its next get.
object_store_full_grace_seconds: float = _env("object_store_full_grace_seconds", 2.0)
# How often the raylet reports its resources and heartbeats to the GCS.
heartbeat_interval: float = _env("heartbeat_interval", 0.5)
# A node silent this long is marked dead by the GCS.
node_death_timeout: float = _env("node_death_timeout", 10.0)
# How long raylets, agents, workers and drivers try to reconnect to a GCS that went away
# (restarted by the head's raylet, or started again on the same storage) before they give
# up: a raylet then stops its node, a driver fails what it waits for. Ray's
# gcs_rpc_server_reconnect_timeout_s.
gcs_reconnect_timeout: float = _env("gcs_reconnect_timeout", 60.0)
# Where a head's GCS keeps its tables when the node is not told (ember.gcs.storage):
# "" is a SQLite file in the session directory; memory:, sqlite:PATH, redis://HOST:PORT.
gcs_storage: str = _env("gcs_storage", "")
# Keeps apart the clusters that share one Redis server (Ray's external_storage_namespace): a
# head started again with the same one finds that cluster's tables.
gcs_storage_namespace: str = _env("gcs_storage_namespace", "default")
# Workers a cluster node's raylet starts ahead of demand: one per CPU, at most this cap.
prestart_worker_cap: int = _env("prestart_worker_cap", 4)
# The same for the embedded node of ember.init(): 0, so an idle local node keeps no idle
# workers (~23 MB each) and no fork server (an idle node holds as little memory as it can); the first
# lease forks its worker once the zygote is up (~0.1 s). Cluster nodes keep prestarting: a
# raylet counts a lease's resources only once a worker takes it, so while a node starts its
# first worker its heartbeats show it free and other raylets spill more work to it.
local_prestart_worker_cap: int = _env("local_prestart_worker_cap", 0)
# Workers a raylet starts at once (spawned, not yet registered); more wait their turn. Ray caps
# this too: 1,000 actor leases at once made 1,000 spawn requests, which filled the fork
# server's pipe and blocked the raylet's loop until its heartbeats lapsed and the node
# declared itself dead. 0: twice the machine's CPUs, at least 8.
max_starting_workers: int = _env("max_starting_workers", 0)
# Idle workers beyond the CPU count are stopped after this long.
idle_worker_kill_seconds: float = _env("idle_worker_kill_seconds", 10.0)
# shared_process actors: how many one host process takes before the raylet starts another
# for the job, and how long a host with no actors left is kept for new ones.
shared_actors_per_host: int = _env("shared_actors_per_host", 2500)
shared_host_idle_seconds: float = _env("shared_host_idle_seconds", 2.0)
# Print the infeasible-task warning after this long pending (Ray warns too).
infeasible_warning_seconds: float = _env("infeasible_warning_seconds", 0.5)
# Cross-node object transfer: chunk size, chunk requests in flight per pull, and how many
# objects a raylet pulls at once (more wait their turn).
object_transfer_chunk_size: int = _env("object_transfer_chunk_size", 8 * 1024 * 1024)
object_transfer_window: int = _env("object_transfer_window", 4)
max_concurrent_pulls: int = _env("max_concurrent_pulls", 4)
# A task whose arguments in shared memory on one node reach this many bytes asks that node
# for its worker (data locality).
locality_min_bytes: int = _env("locality_min_bytes", 100 * 1024)
# Lineage kept for re-running tasks whose shared-memory results a node's death lost, and how
# long a get waits for such a rebuild.
max_lineage_entries: int = _env("max_lineage_entries", 1_000)
reconstruction_timeout: float = _env("reconstruction_timeout", 600.0)
# A worker whose holder saw it die is killed this long later if still alive; until then its
# real exit (code or signal) can be seen and reported.
worker_death_grace: float = _env("worker_death_grace", 0.5)
# At most how often a node whose object store needs room asks its workers and drivers to
# collect garbage (objects kept only by reference cycles), as Ray's global GC does.
object_store_gc_interval_s: float = _env("object_store_gc_interval_s", 10.0)
# How long a worker retiring after max_calls stays to serve what it owns and others still use
# (a task's returned refs to its own child tasks' results) before it exits regardless.
worker_drain_seconds: float = _env("worker_drain_seconds", 300.0)
# How many recent worker exits (and why) a raylet remembers for WorkerCrashedError messages.
worker_exit_reasons_kept: int = _env("worker_exit_reasons_kept", 1_000)
# Peers that have not presented the cluster token yet (every TCP listener): one that has not
# sent it within this many seconds is disconnected, and one IP may hold at most this many
# such connections to one listener at once (their first frame is bounded to 4 KiB anyway).
auth_deadline_seconds: float = _env("auth_deadline_seconds", 5.0)
max_unauthenticated_per_ip: int = _env("max_unauthenticated_per_ip", 64)
# The raylet's memory monitor (Ray's): every this many milliseconds it reads the node's
# memory usage (its cgroup's limit and usage when it runs under a memory limit, else
# /proc/meminfo) and, above the threshold (a fraction of the total), kills one worker (a
# retriable task's first, the newest first) before the kernel's OOM killer picks a victim.
# 0 disables it. EMBER_MEMORY_MONITOR_USAGE_FILE is a test hook: a file holding the usage
# fraction the monitor reads instead of the real one, so tests need not fill the machine.
memory_monitor_refresh_ms: int = _env("memory_monitor_refresh_ms", 250)
memory_usage_threshold: float = _env("memory_usage_threshold", 0.95)
memory_monitor_usage_file: str = _env("memory_monitor_usage_file", "")
# A task the memory monitor killed runs again on its own budget, not max_retries (Ray's
# rule): -1 is unlimited, unless max_retries is 0; each retry waits twice as long as the
# last, from this base, at most oom_retry_delay_max_ms (the pressure has time to pass).
task_oom_retries: int = _env("task_oom_retries", -1)
task_oom_retry_delay_base_ms: int = _env("task_oom_retry_delay_base_ms", 1000)
task_oom_retry_delay_max_ms: int = _env("task_oom_retry_delay_max_ms", 60_000)
# A task that raised an exception its retry_exceptions retries runs again after this many
# milliseconds, each time (Ray 2.60 waits a second between such attempts, measured): a
# transient condition has time to pass before max_retries is spent.
task_retry_delay_ms: int = _env("task_retry_delay_ms", 1000)
# The level of the "ember" loggers in a node's processes (GCS, raylet, agent, workers), a
# name ("DEBUG") or a number: ember.init(logging_level=...) sets it for the node it starts.
logging_level: str = _env("logging_level", "")


def apply_logging_level() -> None:
    """Sets this process's "ember" logger to ``logging_level``, if one was given and it is
    not that already: ``setLevel`` clears every logger's cache, and a worker forked from a
    zygote that set the same level would write to each of those loggers' pages for nothing."""
    if logging_level:
        level = int(logging_level) if logging_level.isdigit() else logging_level.upper()
        log = logging.getLogger("ember")
        if log.level != level and logging.getLevelName(log.level) != level:
            log.setLevel(level)
