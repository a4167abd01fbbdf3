"""The Jobs API's manager, in the head's dashboard process (as Ray's ``JobManager``): it keeps
the submitted jobs' records (``job_records``), starts one supervisor actor per job
(``job_supervisor``) and records what becomes of it.

To create actors the dashboard needs a driver connection. It is made on first need (a
submission, or a job left running by a previous dashboard), with ``ember.init`` in this
process, in a thread so the dashboard's loop never waits for it. Measured on a 2-CPU head:
the first submission takes ~0.2 s and the dashboard's RSS grows 75.7 -> 82.3 MiB (the driver
API's modules and a core worker's I/O thread), where a separate manager process would be
another interpreter (~35 MB, the figure that moved the head's agent into this process) and a
protocol of its own. A dashboard that never sees a job pays nothing.

Supervisors are detached and named (``_ember_job_<submission_id>`` in the ``_ember_jobs``
namespace), so a dashboard started again finds the running ones (``recover``) and collects
their outcome; a supervisor that is gone (its node died) ends its job FAILED.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time
from typing import Any

from ember.dashboard import job_records as jr
from ember.dashboard.job_placement import NoMatchingNode, choose_node
from ember.dashboard.job_supervisor import JobSupervisor
from ember.labels import check_selector

logger = logging.getLogger(__name__)
NAMESPACE = "_ember_jobs"
# A dashboard started again with its head recovers the jobs it finds running before the head's
# node has registered on this machine: it waits this long for one to connect through.
ATTACH_CONNECT_S = 60.0
ALLOWED_RUNTIME_ENV = {"env_vars", "working_dir", "py_modules", "excludes", "config"}


class JobError(Exception):
    """A request the manager refuses; ``status`` is the HTTP status to answer."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def job_manager(ctx: Any) -> JobManager:
    """The dashboard's one manager (``ctx.extra["jobs"]``), made on first use; 503 on a
    dashboard with no GCS (an ``ember.init()`` node's)."""
    jobs = ctx.extra.get("jobs")
    if jobs is None:
        if ctx.gcs is None:
            raise JobError(503, "this dashboard has no GCS: it cannot run jobs")
        jobs = ctx.extra["jobs"] = JobManager(ctx)
    return jobs


class JobManager:
    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx
        self.store = jr.JobStore(ctx.gcs)
        self.records: dict[str, dict[str, Any]] = {}
        self.handles: dict[str, Any] = {}
        self.tasks: dict[str, asyncio.Task] = {}
        self._connect_lock = asyncio.Lock()
        self._loaded = False
        self._load_lock = asyncio.Lock()
        self.stopping: set[str] = set()
        self.driver_cost: dict[str, float] = {}
        # Set when this dashboard is told to stop (``ember stop`` signals every process of the
        # cluster at once): a job's driver or supervisor dying in the same moment is the
        # stop's doing, not the job's failure, and is left unrecorded (_end).
        self.shutting_down = False

    # -- the driver connection -------------------------------------------------------------
    async def _connect(self) -> None:
        async with self._connect_lock:
            import ember

            if "ember.driver" in sys.modules and ember.is_initialized():
                return
            gcs = self.ctx.gcs.address
            temp_dir = os.path.dirname(self.ctx.session_dir.rstrip("/"))

            def init() -> dict[str, float]:
                import psutil

                rss, t0 = psutil.Process().memory_info().rss, time.monotonic()
                ember.init(
                    address=gcs,
                    temp_dir=temp_dir,
                    namespace=NAMESPACE,
                    configure_logging=False,
                    log_to_driver=False,
                )
                return {
                    "seconds": time.monotonic() - t0,
                    "rss_bytes": psutil.Process().memory_info().rss - rss,
                }

            try:
                self.driver_cost = await asyncio.to_thread(init)
            except ConnectionError as e:
                raise JobError(
                    503,
                    f"the dashboard cannot run jobs on this node: {e} (jobs need a cluster "
                    "node, started with `ember start --head`)",
                ) from None
            logger.info("the job manager's driver connection: %s", self.driver_cost)

    async def _connect_once_up(self) -> None:
        """``_connect`` for a job a previous dashboard left running: this dashboard may have
        started (with a restarted head) before the head's node registered on this machine,
        and a driver needs one. Until ``ATTACH_CONNECT_S``, that is a wait, not the job's
        failure: it failed such jobs at once, naming no node's death (seen when the new
        head's node came up a moment after its dashboard)."""
        deadline = time.monotonic() + ATTACH_CONNECT_S
        while True:
            try:
                await self._connect()
                return
            except JobError:
                if time.monotonic() >= deadline:
                    raise
            await asyncio.sleep(0.5)

    # -- records ---------------------------------------------------------------------------
    async def recover(self) -> None:
        """Loads the records from the GCS KV; watches again the jobs a previous dashboard
        left running."""
        # Under a lock, and loaded only once read: a request that came while the start-up's
        # load was under way answered 404 for a job the KV holds (seen after a restart), and
        # a failed read would have left the records empty for good.
        async with self._load_lock:
            if self._loaded:
                return
            for rec in await self.store.all():
                self.records.setdefault(rec["submission_id"], rec)
            self._loaded = True
            for sid, rec in self.records.items():
                if rec["status"] not in jr.TERMINAL and sid not in self.tasks:
                    self.tasks[sid] = asyncio.ensure_future(self._run(sid, None, attach=True))

    async def find(self, job_id: str) -> dict[str, Any]:
        """By submission id or by a driver's job id (a submitted job's, or a driver's started
        by hand); 404 when neither."""
        await self.recover()
        gcs_jobs = await self._gcs_jobs()
        await self._link_drivers(gcs_jobs)
        rec = self.records.get(job_id)
        if rec is None:
            rec = next((r for r in self.records.values() if r.get("job_id") == job_id), None)
        if rec is None:
            rec = next((d for d in await self._drivers(gcs_jobs) if d["job_id"] == job_id), None)
        if rec is None:
            raise JobError(404, f"Job {job_id} does not exist.")
        return rec

    async def list(self) -> list[dict[str, Any]]:
        """The submitted jobs, then the drivers started by hand (as Ray lists them)."""
        await self.recover()
        gcs_jobs = await self._gcs_jobs()
        await self._link_drivers(gcs_jobs)
        return list(self.records.values()) + await self._drivers(gcs_jobs)

    def counts(self) -> dict[str, int]:
        out = dict.fromkeys(jr.STATES, 0)
        for rec in list(self.records.values()):
            out[rec["status"]] = out.get(rec["status"], 0) + 1
        return out

    async def _save(self, rec: dict[str, Any], **changes: Any) -> None:
        rec.update(changes)
        await self.store.put(rec)

    async def _gcs_jobs(self) -> list[dict[str, Any]]:
        """The GCS's job table (every driver's job); empty when it cannot be read."""
        if self.ctx.gcs is None:
            return []
        try:
            return await self.ctx.gcs.list_jobs()
        except Exception as e:  # the records are served without it
            logger.warning("could not list the GCS's jobs: %s", e)
            return []

    async def _drivers(self, gcs_jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The drivers no submission started, as Ray's DRIVER entries."""
        if not gcs_jobs:
            return []
        try:
            ips = {n["node_id"]: n.get("node_ip") or "" for n in await self.ctx.gcs.list_nodes()}
        except Exception:  # an address is not worth failing the list for
            ips = {}
        rows = (jr.driver_details(j, ips.get(j.get("node_id") or "", "")) for j in gcs_jobs)
        return [r for r in rows if r is not None]

    async def _link_drivers(self, gcs_jobs: list[dict[str, Any]] | None = None) -> None:
        """The driver's job id of started jobs, from the GCS's job table (the driver
        registers the submission id it was started with)."""
        want = {
            sid: r
            for sid, r in self.records.items()
            if r["status"] != jr.PENDING and not r["job_id"]
        }
        if not want:
            return
        for job in await self._gcs_jobs() if gcs_jobs is None else gcs_jobs:
            rec = want.get(job.get("submission_id") or "")
            if rec is not None:
                info = {
                    "id": job["job_id"],
                    "node_ip_address": rec.get("driver_node_ip") or "",
                    "pid": str(job.get("driver_pid", "")),
                }
                await self._save(rec, job_id=job["job_id"], driver_info=info)

    # -- submit, run, stop, delete ---------------------------------------------------------
    async def submit(
        self,
        req: dict[str, Any],
        package: str | None,
        modules: list[str] = (),
    ) -> str:
        await self.recover()
        sid = req.get("submission_id") or req.get("job_id") or jr.new_submission_id()
        if sid in self.records or await self.store.get(sid) is not None:
            raise JobError(
                400,
                f"Job with submission_id {sid} already exists. Please use a different "
                "submission_id.",
            )
        runtime_env = req.get("runtime_env") or {}
        unknown = sorted(set(runtime_env) - ALLOWED_RUNTIME_ENV)
        if unknown:
            raise JobError(
                400,
                f"runtime_env fields {unknown} are not supported by Ember's jobs; supported: "
                f"{sorted(ALLOWED_RUNTIME_ENV)}",
            )
        try:
            check_selector(req.get("entrypoint_label_selector") or {})
        except ValueError as e:
            raise JobError(400, f"entrypoint_label_selector: {e}") from None
        await self._connect()
        resources = {
            k: req.get(k)
            for k in (
                "entrypoint_num_cpus",
                "entrypoint_num_gpus",
                "entrypoint_memory",
                "entrypoint_resources",
                "entrypoint_label_selector",
            )
        }
        rec = jr.new_record(sid, req["entrypoint"], req.get("metadata"), runtime_env, resources)
        self.records[sid] = rec
        await self.store.put(rec)
        self.tasks[sid] = asyncio.ensure_future(self._run(sid, package, modules=list(modules)))
        return sid

    async def _run(
        self,
        sid: str,
        package: str | None,
        attach: bool = False,
        modules: list[str] | None = None,
    ) -> None:
        import ember

        rec = self.records[sid]
        try:
            await (self._connect_once_up() if attach else self._connect())
            if attach:  # a previous dashboard created it
                handle = await asyncio.to_thread(ember.get_actor, _actor_name(sid), NAMESPACE)
            else:
                node = choose_node(rec, await self.ctx.gcs.list_nodes())
                handle = await asyncio.to_thread(
                    self._create, sid, rec, node, package, modules or []
                )
            self.handles[sid] = handle
            where = await handle.start.remote()
        except NoMatchingNode as e:
            await self._end(rec, jr.FAILED, f"Job could not start: {e}", "JOB_NO_MATCHING_NODE")
            return
        except Exception as e:
            if rec["status"] not in jr.TERMINAL:
                # A supervisor a previous dashboard left running is gone: most likely its
                # node died (the whole head, when the job ran there), which _death names.
                if attach:
                    why, kind = await self._death(rec, e), "JOB_SUPERVISOR_ACTOR_DIED"
                else:
                    why = f"Job supervisor actor could not start: {e}"
                    kind = "JOB_SUPERVISOR_ACTOR_START_FAILURE"
                await self._end(rec, jr.FAILED, why, kind)
            return
        if rec["status"] == jr.PENDING:
            await self._save(
                rec,
                status=jr.RUNNING,
                message=jr.MSG_RUNNING,
                driver_node_id=where["node_id"],
                driver_node_ip=where["node_ip"],
                driver_pid=where["pid"],
                log_name=where["log_name"],
            )
        try:
            outcome = await handle.wait.remote()
        except Exception as e:
            await self._end(rec, jr.FAILED, await self._death(rec, e), "JOB_SUPERVISOR_ACTOR_DIED")
            return
        status, message, error_type = jr.finished_message(outcome)
        await self._link_drivers()
        await self._end(rec, status, message, error_type, outcome.get("exit_code"))

    async def _death(self, rec: dict[str, Any], error: Exception) -> str:
        """Why a job's supervisor died: its node's death, named in full with the GCS's
        reason, when that is what happened (the actor's own error shortens the node id)."""
        node_id = rec.get("driver_node_id")
        try:
            nodes = await self.ctx.gcs.list_nodes() if node_id else []
        except Exception as e:  # the actor's error alone still says what it knows
            logger.warning("could not list the GCS's nodes: %s", e)
            nodes = []
        node = next((n for n in nodes if n["node_id"] == node_id), None)
        if node is not None and node["state"] == "DEAD":
            what = "the head node" if node.get("is_head") else "node"
            return (
                f"Job failed: {what} {node_id} ({node.get('node_ip')}), where its entrypoint "
                f"ran, died ({node.get('death_reason') or 'no reason given'}); the "
                f"entrypoint's processes were ended with it. The supervisor's error: {error}"
            )
        return f"Job supervisor actor died: {error}"

    def _create(
        self,
        sid: str,
        rec: dict[str, Any],
        node: str | None,
        package: str | None,
        modules: list[str],
    ) -> Any:
        import ember
        from ember import global_state
        from ember.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        opts: dict[str, Any] = {
            "name": _actor_name(sid),
            "namespace": NAMESPACE,
            "lifetime": "detached",
            "max_restarts": 0,
            "num_cpus": rec.get("entrypoint_num_cpus") or 0,
        }
        if rec.get("entrypoint_num_gpus"):
            opts["num_gpus"] = rec["entrypoint_num_gpus"]
        if rec.get("entrypoint_memory"):
            opts["memory"] = rec["entrypoint_memory"]
        if rec.get("entrypoint_resources"):
            opts["resources"] = rec["entrypoint_resources"]
        if node is not None:  # the head, or a node with the selected labels
            opts["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node, soft=False)
        address = global_state.worker.node.get("cluster_address", "").removeprefix("tcp:")
        env_vars = (rec.get("runtime_env") or {}).get("env_vars") or {}
        actor = ember.remote(JobSupervisor).options(**opts)
        return actor.remote(sid, rec["entrypoint"], env_vars, address, package, modules)

    async def _end(
        self,
        rec: dict[str, Any],
        status: str,
        message: str,
        error_type: str | None,
        exit_code: int | None = None,
    ) -> None:
        if self.shutting_down and status == jr.FAILED and (exit_code is None or exit_code < 0):
            # Killed by a signal, or its supervisor gone, while this dashboard stops: the
            # job's last status stays what it was (the history says the cluster stopped
            # while it was so); a dashboard that starts again attaches to it if it lives.
            logger.info(
                "not recording %s as FAILED: the dashboard is stopping", rec["submission_id"]
            )
            return
        await self._save(
            rec,
            status=status,
            message=message,
            error_type=error_type,
            driver_exit_code=exit_code,
            end_time=int(time.time() * 1000),
        )
        if rec["submission_id"] not in self.stopping:
            await self._kill(rec["submission_id"])

    async def _kill(self, sid: str) -> None:
        """The supervisor's work is done once its job's outcome is recorded."""
        handle = self.handles.pop(sid, None)
        if handle is not None:
            import ember

            try:
                await asyncio.to_thread(ember.kill, handle)
            except Exception as e:
                logger.info("supervisor of %s already gone: %s", sid, e)

    async def _submitted(self, job_id: str, what: str) -> dict[str, Any]:
        rec = await self.find(job_id)
        if rec["type"] == "DRIVER":
            raise JobError(
                400,
                f"Job {job_id} is a driver started outside the Jobs API (its entrypoint: "
                f"{rec['entrypoint']!r}): only submitted jobs can be {what}.",
            )
        return rec

    async def stop(self, job_id: str) -> bool:
        rec = await self._submitted(job_id, "stopped")
        sid = rec["submission_id"]
        if rec["status"] in jr.TERMINAL:
            return False
        handle = self.handles.get(sid)
        if rec["status"] == jr.RUNNING and handle is not None:
            # The watcher records the outcome but leaves the supervisor to this call, which
            # may still be answering when the entrypoint's exit is seen.
            self.stopping.add(sid)
            try:
                stopped = await handle.stop.remote()
                await self._wait_ended(rec)
            finally:
                self.stopping.discard(sid)
            await self._kill(sid)
            return bool(stopped)
        # Still PENDING (its supervisor waits for resources): it never runs.
        task = self.tasks.get(sid)
        if task is not None:
            task.cancel()
        await self._end(rec, jr.STOPPED, jr.MSG_STOPPED, None)
        return True

    async def _wait_ended(self, rec: dict[str, Any], timeout: float = 10.0) -> None:
        """Until the watcher has recorded the outcome, so a status read after ``stop``
        answers STOPPED (as Ray's CLI expects)."""
        deadline = time.monotonic() + timeout
        while rec["status"] not in jr.TERMINAL and time.monotonic() < deadline:
            await asyncio.sleep(0.05)

    async def delete(self, job_id: str) -> bool:
        rec = await self._submitted(job_id, "deleted")
        if rec["status"] not in jr.TERMINAL:
            raise JobError(
                400,
                f"Attempted to delete job with submission_id {rec['submission_id']}, but it is "
                f"in a non-terminal state {rec['status']}. Stop it first.",
            )
        self.records.pop(rec["submission_id"], None)
        self.tasks.pop(rec["submission_id"], None)
        return await self.store.delete(rec["submission_id"])


def _actor_name(submission_id: str) -> str:
    return f"_ember_job_{submission_id}"
