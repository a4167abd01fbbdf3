"""The GCS's job table: a driver registers its job and it runs until the driver says it
finished or its connection drops. What ends with a job (its non-detached actors and
placement groups, the raylets' per-job state) is wired in by the server as ``on_finished``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ember.lifecycle import Lifecycle, LifecycleState, Track
from ember.protocol.connection import Connection


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

    def running(self, job_id: bytes) -> bool:
        """True unless the job is known to have finished: an actor of a job never registered
        here is not treated as orphaned."""
        track = self.tracks.get(job_id)
        return track is None or track.state is not JobState.FINISHED

    def h_register_job(self, conn: Connection, body: dict) -> dict:
        job_id = body["job_id"]
        self.tracks[job_id] = JOB_LIFECYCLE.track(job_id.hex(), JobState.RUNNING)
        self.jobs[job_id] = dict(body, start_time=time.time(), state=JobState.RUNNING.name)
        conn.state["job_id"] = job_id
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
        self.on_finished(job_id, reason)
