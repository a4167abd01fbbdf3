"""The GCS's job table: a driver registers its job and it runs until the driver says it
finished or its connection drops. What ends with a job (its non-detached actors and
placement groups, the raylets' per-job state) is wired in by the server as ``on_finished``.
"""

from __future__ import annotations

import pickle
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ember.lifecycle import Lifecycle, LifecycleState, Track
from ember.protocol.connection import Connection

if TYPE_CHECKING:
    from ember.gcs.storage import Store


class JobState(LifecycleState):
    """Member names are the strings ``list_jobs`` replies carry."""

    RUNNING = "RUNNING"
    FINISHED = "FINISHED"


JOB_LIFECYCLE: Lifecycle[JobState] = Lifecycle(
    "job", {JobState.RUNNING: {"finished": JobState.FINISHED}}
)


def _nothing(*args: Any) -> None:
    pass


class JobTable:
    def __init__(self) -> None:
        # {job_id: the driver's registration plus start/end time and state}: list_jobs'
        # reply as it is, so "state" there is the JobState's name.
        self.jobs: dict[bytes, dict] = {}
        self.tracks: dict[bytes, Track[JobState]] = {}
        # (job_id, reason): a job finished.
        self.on_finished: Callable[[bytes, str], None] = _nothing
        self.store: Store | None = None
        # Jobs read back from storage as RUNNING whose driver has not registered again on
        # this GCS process: ``expire_unclaimed`` ends them once the reconnect timeout passed.
        self.unclaimed: set[bytes] = set()

    def _save(self, job_id: bytes) -> None:
        if self.store is not None:
            self.store.mark("jobs", job_id, lambda: pickle.dumps(self.jobs[job_id]))

    def restore(self, rows: dict[bytes, bytes]) -> None:
        for job_id, data in rows.items():
            job = pickle.loads(data)
            self.jobs[job_id] = job
            self.tracks[job_id] = JOB_LIFECYCLE.track(job_id.hex(), JobState[job["state"]])
            if job["state"] == JobState.RUNNING.name:
                self.unclaimed.add(job_id)

    def expire_unclaimed(self, timeout: float) -> None:
        """Ends the restored jobs whose driver did not come back within ``timeout``: it died
        while the GCS was away (a restart alone never ends a job)."""
        for job_id in list(self.unclaimed):
            self.finish(
                job_id, f"its driver did not reconnect within {timeout:g} s of the GCS restarting"
            )
        self.unclaimed.clear()

    def running(self, job_id: bytes) -> bool:
        """True unless the job is known to have finished: an actor of a job never registered
        here is not treated as orphaned."""
        track = self.tracks.get(job_id)
        return track is None or track.state is not JobState.FINISHED

    def h_register_job(self, conn: Connection, body: dict) -> dict:
        job_id = body["job_id"]
        conn.state["job_id"] = job_id
        if job_id in self.unclaimed:  # its driver is back after a GCS restart
            self.unclaimed.discard(job_id)
            return {"ok": True}
        self.tracks[job_id] = JOB_LIFECYCLE.track(job_id.hex(), JobState.RUNNING)
        self.jobs[job_id] = dict(body, start_time=time.time(), state=JobState.RUNNING.name)
        self._save(job_id)
        return {"ok": True}

    def h_job_finished(self, conn: Connection, body: dict) -> dict:
        self.finish(body["job_id"], "the driver exited", by_driver=True)
        conn.state.pop("job_id", None)
        return {"ok": True}

    def h_list_jobs(self, conn: Connection, body: Any) -> list[dict]:
        return list(self.jobs.values())

    def finish(self, job_id: bytes, reason: str, by_driver: bool = False) -> None:
        """``by_driver``: the driver said it finished (``ember.shutdown``, at exit too); else
        its connection dropped first (killed, crashed), which the Jobs API reads as FAILED."""
        track = self.tracks.get(job_id)
        if track is None or track.state is JobState.FINISHED:
            return
        track.fire("finished")
        job = self.jobs[job_id]
        job["state"] = track.state.name
        job["end_time"] = time.time()
        job["end_reason"] = reason
        job["finished_by_driver"] = by_driver
        self.unclaimed.discard(job_id)
        self._save(job_id)
        self.on_finished(job_id, reason)
