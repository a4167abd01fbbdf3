"""Submitted jobs' records: their states and messages, the shape Ray's clients read
(``JobDetails``), and their storage in the GCS KV (namespace ``jobs``), so a dashboard started
again finds them. The job manager (``job_manager.py``) is their only writer.
"""

from __future__ import annotations

import json
import random
import string
import time
from typing import Any

from ember.dashboard.schemas import JOBS

NAMESPACE = "jobs"
KEY_PREFIX = b"job:"

PENDING, RUNNING, STOPPED, SUCCEEDED, FAILED = (
    "PENDING",
    "RUNNING",
    "STOPPED",
    "SUCCEEDED",
    "FAILED",
)
STATES = (PENDING, RUNNING, STOPPED, SUCCEEDED, FAILED)
TERMINAL = frozenset({STOPPED, SUCCEEDED, FAILED})

# Ray's messages, so what users read matches Ray's docs.
MSG_PENDING = (
    "Job has not started yet. It may be waiting for resources (CPUs, GPUs, memory, custom "
    "resources) to become available."
)
MSG_RUNNING = "Job is currently running."
MSG_SUCCEEDED = "Job finished successfully."
MSG_STOPPED = "Job was intentionally stopped."


def new_submission_id() -> str:
    """``raysubmit_`` and 16 characters, none of the confusable ``I l o O 0`` (as Ray)."""
    chars = sorted(set(string.ascii_letters + string.digits) - set("IloO0"))
    return "raysubmit_" + "".join(random.SystemRandom().choices(chars, k=16))


def new_record(
    submission_id: str,
    entrypoint: str,
    metadata: dict[str, str] | None,
    runtime_env: dict[str, Any] | None,
    resources: dict[str, Any],
) -> dict[str, Any]:
    """A PENDING job. ``resources`` keeps the entrypoint's requests (``entrypoint_num_cpus``
    etc.), which Ray's JobDetails also carry."""
    return {
        "type": "SUBMISSION",
        "job_id": None,
        "submission_id": submission_id,
        "driver_info": None,
        "status": PENDING,
        "entrypoint": entrypoint,
        "message": MSG_PENDING,
        "error_type": None,
        "start_time": int(time.time() * 1000),
        "end_time": None,
        "metadata": dict(metadata or {}),
        "runtime_env": dict(runtime_env or {}),
        "driver_agent_http_address": None,
        "driver_node_id": None,
        "driver_exit_code": None,
        **resources,
        # Ember's own, not sent to Ray's clients' models (they ignore unknown fields anyway).
        "driver_pid": None,
        "log_name": None,
    }


def finished_message(outcome: dict[str, Any]) -> tuple[str, str, str | None]:
    """``(status, message, error_type)`` for a supervisor's ``wait`` answer."""
    code = outcome.get("exit_code")
    if outcome.get("stopped"):
        return STOPPED, MSG_STOPPED, None
    if code == 0:
        return SUCCEEDED, MSG_SUCCEEDED, None
    tail = outcome.get("tail") or ""
    message = f"Job entrypoint command failed with exit code {code}"
    if tail:
        message += f", last available logs (truncated to 20,000 chars):\n{tail}"
    return FAILED, message, "JOB_ENTRYPOINT_COMMAND_ERROR"


# Drivers in these namespaces are the runtime's own (the job manager's, Ray's internal ones).
INTERNAL_NAMESPACES = ("_ember", "_ray_internal_")
MSG_DRIVER_LOST = (
    "The driver's connection to the cluster dropped before it ended its job (it was killed "
    "or crashed): {reason}."
)


def driver_details(job: dict[str, Any], node_ip: str) -> dict[str, Any] | None:
    """A driver started by hand (``python script.py`` calling ``ember.init``) as Ray lists
    it (``get_driver_jobs`` in Ray's job module): ``type`` DRIVER, no submission id, its
    command line as the entrypoint; RUNNING until its job ended. Ray reads every ended
    driver SUCCEEDED; here one whose connection dropped before it said it finished (SIGKILL,
    a crash) reads FAILED, saying so. None for the runtime's own drivers and for submitted
    jobs' drivers (their SUBMISSION entry carries them)."""
    if (job.get("namespace") or "").startswith(INTERNAL_NAMESPACES) or job.get("submission_id"):
        return None
    status, message, error_type = RUNNING, None, None
    if job.get("state") == "FINISHED":
        if job.get("finished_by_driver", True):
            status = SUCCEEDED
        else:
            status, error_type = FAILED, "DRIVER_DISCONNECTED"
            message = MSG_DRIVER_LOST.format(reason=job.get("end_reason") or "no reason given")
    job_id = job["job_id"]
    return {
        "type": "DRIVER",
        "job_id": job_id,
        "submission_id": None,
        "driver_info": {
            "id": job_id,
            "node_ip_address": node_ip,
            "pid": str(job.get("driver_pid") or ""),
        },
        "status": status,
        "entrypoint": job.get("entrypoint") or "",
        "message": message,
        "error_type": error_type,
        "start_time": _ms(job.get("start_time")),
        "end_time": _ms(job.get("end_time")),
        "metadata": {},
        "runtime_env": {},
        "driver_agent_http_address": None,
        "driver_node_id": job.get("node_id") or None,
        "driver_exit_code": None,
    }


def _ms(seconds: float | None) -> int | None:
    return int(seconds * 1000) if seconds else None


def details(record: dict[str, Any]) -> dict[str, Any]:
    """What ``GET /api/jobs/`` answers per job: its declared row (``schemas.Job``: Ray's
    JobDetails, then Ember's fields), every field present, in order."""
    return {k: record.get(k) for k in JOBS.fields}


class JobStore:
    """The records in the GCS KV, one key per submission id."""

    def __init__(self, gcs: Any) -> None:
        self.gcs = gcs

    async def put(self, record: dict[str, Any]) -> None:
        key = KEY_PREFIX + record["submission_id"].encode()
        await self.gcs.kv("kv_put", NAMESPACE, key, json.dumps(record).encode())
        _record(self.gcs, "job", {"record": record})

    async def get(self, submission_id: str) -> dict[str, Any] | None:
        raw = await self.gcs.kv("kv_get", NAMESPACE, KEY_PREFIX + submission_id.encode())
        return json.loads(raw) if raw else None

    async def delete(self, submission_id: str) -> bool:
        deleted = await self.gcs.kv("kv_del", NAMESPACE, KEY_PREFIX + submission_id.encode())
        _record(self.gcs, "job_deleted", {"submission_id": submission_id})
        return bool(deleted)

    async def all(self) -> list[dict[str, Any]]:
        keys = await self.gcs.kv("kv_keys", NAMESPACE, KEY_PREFIX)
        out = []
        for key in keys:
            raw = await self.gcs.kv("kv_get", NAMESPACE, key)
            if raw:
                out.append(json.loads(raw))
        return sorted(out, key=lambda r: r.get("start_time") or 0)


def _record(gcs: Any, kind: str, body: dict[str, Any]) -> None:
    """Keeps the change in the session's history too (``history_writer``), through the
    dashboard's state that the GCS client feeds."""
    state = getattr(gcs, "state", None)
    if state is not None and getattr(state, "recorder", None) is not None:
        state.record(kind, body)
