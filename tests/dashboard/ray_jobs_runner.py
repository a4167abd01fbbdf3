"""Runs Ray's own Jobs clients (``ray job ...`` and ``JobSubmissionClient``) against a
dashboard, inside the Ray environment (``tests/tools/.ray-venv``), and prints what they
answered as one JSON object.

    python ray_jobs_runner.py URL PROGRAM

Ember is not importable here: only Ray's code talks to the dashboard.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import time

from click.testing import CliRunner
from ray.dashboard.modules.job.cli import job_cli_group
from ray.job_submission import JobStatus, JobSubmissionClient


def main(url: str, program: str) -> dict:
    runner = CliRunner()
    out: dict = {"cli": {}, "sdk": {}}

    def run(key: str, *args: str) -> str:
        res = runner.invoke(job_cli_group, [*args[:1], "--address", url, *args[1:]])
        out["cli"][key] = {"exit_code": res.exit_code, "output": res.output}
        return res.output

    run("submit", "submit", "--submission-id", "cli-wait", "--", "python", "-c", program)
    # A local working_dir: Ray's client zips and uploads it, the entrypoint runs inside it.
    with tempfile.TemporaryDirectory() as work:
        with open(os.path.join(work, "wd_main.py"), "w") as f:
            f.write("import os\nfrom wd_helper import MARK\nprint(MARK, os.environ['FLAVOUR'])\n")
        with open(os.path.join(work, "wd_helper.py"), "w") as f:
            f.write("MARK = 'wd-marker'\n")
        run(
            "submit_wd",
            "submit",
            "--working-dir",
            work,
            "--runtime-env-json",
            json.dumps({"env_vars": {"FLAVOUR": "from-cli"}}),
            "--",
            "python",
            "wd_main.py",
        )
    run(
        "submit_no_wait",
        "submit",
        "--no-wait",
        "--submission-id",
        "cli-sleep",
        "--",
        "sleep",
        "600",
    )
    run("status", "status", "cli-wait")
    run("logs", "logs", "cli-wait")
    run("list", "list")
    run("stop", "stop", "cli-sleep")
    run("status_stopped", "status", "cli-sleep")
    run("delete", "delete", "cli-sleep")

    client = JobSubmissionClient(url)
    sid = client.submit_job(
        entrypoint=f"python -c {json.dumps(program)}",
        runtime_env={"env_vars": {"GREETING": "from-sdk"}},
        metadata={"k": "v"},
    )
    lines: list[str] = []

    async def tail() -> None:
        async for chunk in client.tail_job_logs(sid):
            lines.append(chunk)

    asyncio.run(asyncio.wait_for(tail(), 60))
    info = client.get_job_info(sid)
    out["sdk"] = {
        "tail": "".join(lines),
        "status": str(client.get_job_status(sid)),
        "info": {"status": str(info.status), "exit": info.driver_exit_code, "meta": info.metadata},
        "logs": client.get_job_logs(sid),
        "listed": sid in [j.submission_id for j in client.list_jobs()],
    }
    # py_modules: Ray's client uploads the module's directory; the entrypoint imports it.
    with tempfile.TemporaryDirectory() as where:
        lib = os.path.join(where, "raylib_mod")
        os.mkdir(lib)
        with open(os.path.join(lib, "__init__.py"), "w") as f:
            f.write("NAME = 'from-py-modules'\n")
        with_modules = client.submit_job(
            entrypoint="python -c 'import raylib_mod; print(raylib_mod.NAME)'",
            runtime_env={"py_modules": [lib]},
        )
    deadline = time.monotonic() + 60
    while not client.get_job_status(with_modules).is_terminal() and time.monotonic() < deadline:
        time.sleep(0.2)
    out["sdk"]["py_modules"] = {
        "status": str(client.get_job_status(with_modules)),
        "logs": client.get_job_logs(with_modules),
    }
    failing = client.submit_job(entrypoint="exit 7")
    deadline = time.monotonic() + 60
    while client.get_job_status(failing) not in (JobStatus.FAILED, JobStatus.SUCCEEDED):
        if time.monotonic() > deadline:
            break
        time.sleep(0.2)
    f = client.get_job_info(failing)
    out["sdk"]["failing"] = {
        "status": str(f.status),
        "exit": f.driver_exit_code,
        "message": f.message,
    }
    sleeper = client.submit_job(entrypoint="sleep 600")
    while client.get_job_status(sleeper) == JobStatus.PENDING and time.monotonic() < deadline:
        time.sleep(0.1)
    out["sdk"]["stop"] = client.stop_job(sleeper)
    out["sdk"]["stopped_status"] = str(client.get_job_status(sleeper))
    out["sdk"]["delete"] = client.delete_job(sleeper)
    return out


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2])))
