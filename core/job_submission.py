"""``ember.job_submission``: submit, watch and stop jobs on a cluster through its dashboard,
with Ray 2.x's ``ray.job_submission`` names (``JobSubmissionClient``, ``JobStatus``,
``JobDetails``), so a Ray program's job code runs with ``import ember as ray``.

It speaks the Jobs REST API Ray's own clients use (``docs/dashboard-api.md``): ``POST
/api/jobs/``, ``GET /api/jobs/``, ``GET /api/jobs/{id}``, ``GET /api/jobs/{id}/logs``, the
WebSocket ``/api/jobs/{id}/logs/tail``, ``POST /api/jobs/{id}/stop``, ``DELETE
/api/jobs/{id}`` and ``GET|PUT /api/packages/{protocol}/{name}``. A local ``working_dir`` or
``py_modules`` directory is zipped here, named by its content (``gcs://_ray_pkg_<hash>.zip``,
as Ray names packages) and uploaded once; the job's runtime_env then names the package.
"""

from __future__ import annotations

import enum
import os
from collections.abc import AsyncIterator, Iterator
from typing import Any

from ember.rest_client import DashboardClient, DashboardError, connect_dashboard
from ember.runtime_env_packages import package_name, zip_directory

# Ray's limit on a package's size, and what its error says to do.
PACKAGE_PROTOCOL = "gcs"


class JobStatus(enum.StrEnum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    STOPPED = "STOPPED"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"

    def is_terminal(self) -> bool:
        return self in (JobStatus.STOPPED, JobStatus.SUCCEEDED, JobStatus.FAILED)


class JobDetails:
    """A job as the dashboard describes it: Ray's ``JobDetails`` fields as attributes
    (``status`` as a ``JobStatus``), and ``dict(details)`` for all of them."""

    def __init__(self, fields: dict[str, Any]) -> None:
        self._fields = dict(fields)
        if self._fields.get("status") is not None:
            self._fields["status"] = JobStatus(self._fields["status"])

    def __getattr__(self, name: str) -> Any:
        try:
            return self.__dict__["_fields"][name]
        except KeyError:
            raise AttributeError(name) from None

    def __iter__(self) -> Iterator[tuple[str, Any]]:
        return iter(self._fields.items())

    def __repr__(self) -> str:
        return f"JobDetails({self._fields!r})"


JobInfo = JobDetails  # Ray's older name


class JobRequestError(RuntimeError):
    """A request the dashboard refused or could not be sent: the SDK's message (Ray's shape:
    the method and route), with the HTTP ``status`` (None: not reached) and the dashboard's
    own ``reason`` apart, for a client such as the CLI that words it for its users."""

    def __init__(self, message: str, status: int | None, reason: str) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


class JobSubmissionClient:
    """Ray's client, on Ember. ``address``: the dashboard's URL (``http://HOST:8265``) or the
    cluster's address; None: ``EMBER_ADDRESS`` / ``RAY_ADDRESS``, else this machine's
    cluster. The cluster token comes from ``EMBER_TOKEN`` or, on the head, its session."""

    def __init__(
        self,
        address: str | None = None,
        create_cluster_if_needed: bool = False,
        cookies: dict[str, Any] | None = None,
        metadata: dict[str, Any] | None = None,
        headers: dict[str, Any] | None = None,
        verify: str | bool | None = True,
        *,
        _dashboard: DashboardClient | None = None,
    ) -> None:
        if _dashboard is None:  # else one found by the caller (the CLI, with its options)
            address = address or os.environ.get("RAY_ADDRESS") or None
            try:
                _dashboard = connect_dashboard(address)
            except DashboardError as e:
                raise ConnectionError(str(e)) from None
        self._dashboard: DashboardClient = _dashboard
        self._default_metadata = dict(metadata or {})
        self._version = self._call("GET", "/api/version")

    @property
    def address(self) -> str:
        return self._dashboard.url

    def get_version(self) -> str:
        return str(self._version.get("version", ""))

    # -- requests ------------------------------------------------------------------------
    def _call(self, method: str, path: str, document: Any = None) -> Any:
        try:
            return self._dashboard.send_json(method, path, document)
        except DashboardError as e:
            raise JobRequestError(
                f"Request failed ({method} {path}): {e}", e.status, str(e)
            ) from None

    def _status_of(self, method: str, path: str, body: bytes | None = None) -> int:
        """The HTTP status of a request whose refusal is an answer (404: no such package)."""
        try:
            with self._dashboard.open(method, path, body=body, content_type="application/zip"):
                return 200
        except DashboardError as e:
            if e.status is None:
                raise RuntimeError(str(e)) from None
            if e.status == 404:
                return 404
            raise RuntimeError(f"Request failed ({method} {path}): {e}") from None

    # -- jobs ----------------------------------------------------------------------------
    def submit_job(
        self,
        *,
        entrypoint: str,
        job_id: str | None = None,
        runtime_env: dict[str, Any] | None = None,
        metadata: dict[str, str] | None = None,
        submission_id: str | None = None,
        entrypoint_num_cpus: int | float | None = None,
        entrypoint_num_gpus: int | float | None = None,
        entrypoint_memory: int | None = None,
        entrypoint_resources: dict[str, float] | None = None,
        entrypoint_label_selector: dict[str, str] | None = None,
    ) -> str:
        """Submits ``entrypoint`` (a shell command) and returns its submission id."""
        runtime_env = dict(runtime_env or {})
        self._upload_local_packages(runtime_env)
        request = {
            "entrypoint": entrypoint,
            "submission_id": submission_id or job_id,
            "runtime_env": runtime_env,
            "metadata": {**self._default_metadata, **(metadata or {})},
            "entrypoint_num_cpus": entrypoint_num_cpus,
            "entrypoint_num_gpus": entrypoint_num_gpus,
            "entrypoint_memory": entrypoint_memory,
            "entrypoint_resources": entrypoint_resources,
            "entrypoint_label_selector": entrypoint_label_selector,
        }
        reply = self._call(
            "POST", "/api/jobs/", {k: v for k, v in request.items() if v is not None}
        )
        return reply["submission_id"]

    def stop_job(self, job_id: str) -> bool:
        return bool(self._call("POST", f"/api/jobs/{job_id}/stop")["stopped"])

    def delete_job(self, job_id: str) -> bool:
        return bool(self._call("DELETE", f"/api/jobs/{job_id}")["deleted"])

    def get_job_info(self, job_id: str) -> JobDetails:
        return JobDetails(self._call("GET", f"/api/jobs/{job_id}"))

    def list_jobs(self) -> list[JobDetails]:
        return [JobDetails(j) for j in self._call("GET", "/api/jobs/")]

    def get_job_status(self, job_id: str) -> JobStatus:
        return self.get_job_info(job_id).status

    def get_job_logs(self, job_id: str) -> str:
        return self._call("GET", f"/api/jobs/{job_id}/logs")["logs"]

    async def tail_job_logs(self, job_id: str) -> AsyncIterator[str]:
        """The job's output as it is written, until the job has ended and its last line was
        sent (the server closes the stream then)."""
        from websockets.asyncio.client import connect
        from websockets.exceptions import ConnectionClosedOK

        url = "ws" + self._dashboard.url[4:] + f"/api/jobs/{job_id}/logs/tail"
        headers = (
            {"Authorization": f"Bearer {self._dashboard.token}"} if self._dashboard.token else None
        )
        async with connect(url, additional_headers=headers, max_size=None) as ws:
            while True:
                try:
                    message = await ws.recv()
                except ConnectionClosedOK:
                    return
                yield message if isinstance(message, str) else message.decode("utf-8", "replace")

    # -- packages (a local working_dir or py_modules directory, uploaded once) ------------
    def _upload_local_packages(self, runtime_env: dict[str, Any]) -> None:
        excludes = list(runtime_env.get("excludes") or ())
        working_dir = runtime_env.get("working_dir")
        if isinstance(working_dir, str) and _is_local(working_dir):
            runtime_env["working_dir"] = self._upload_dir(working_dir, excludes)
        modules = runtime_env.get("py_modules")
        if modules:
            # A module's package holds its directory (Ray's include_parent_dir): unpacked,
            # the folder it lands in goes on the import path.
            runtime_env["py_modules"] = [
                self._upload_dir(m, excludes, parent=True)
                if isinstance(m, str) and _is_local(m)
                else m
                for m in modules
            ]

    def _upload_dir(self, path: str, excludes: list[str], parent: bool = False) -> str:
        data = zip_directory(path, excludes, include_parent_dir=parent)
        name = package_name(data)
        where = f"/api/packages/{PACKAGE_PROTOCOL}/{name}"
        if self._status_of("GET", where) == 404:
            self._status_of("PUT", where, data)
        return f"{PACKAGE_PROTOCOL}://{name}"


def _is_local(uri: str) -> bool:
    return "://" not in uri
