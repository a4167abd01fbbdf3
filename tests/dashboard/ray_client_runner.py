"""Runs Ray's own state clients against a dashboard, inside the Ray environment
(``tests/tools/.ray-venv``), and prints what they answered as one JSON object.

    python ray_client_runner.py URL ACTOR_ID

Ray's CLI (``ray list|get|summary``) is run in this one process through click's runner on
Ray's own command group, so a dozen commands cost one Ray import, not twelve. Ray's SDK
(``ray.util.state``) and Jobs client are called the same way. Ember is not importable
here: only Ray's code talks to the dashboard.
"""

from __future__ import annotations

import json
import sys
import warnings

from click.testing import CliRunner
from ray.job_submission import JobSubmissionClient
from ray.scripts.scripts import cli
from ray.util.state import get_actor, list_actors, list_tasks


def main(url: str, actor_id: str) -> dict:
    runner = CliRunner()
    out: dict = {"cli": {}, "sdk": {}}

    def run(*args: str) -> None:
        res = runner.invoke(cli, [*args, "--address", url], catch_exceptions=True)
        out["cli"][" ".join(args)] = {
            "exit_code": res.exit_code,
            "output": res.output,
            "error": repr(res.exception) if res.exception else None,
        }

    for resource in ("actors", "tasks", "nodes", "workers", "objects", "placement-groups", "jobs"):
        run("list", resource, "--format", "json", "--limit", "1000")
    run("list", "actors", "--filter", "state=ALIVE", "--format", "json")
    run("list", "actors", "--filter", "state!=ALIVE", "--format", "json")
    run("list", "tasks", "--filter", "state=FAILED", "--format", "json", "--detail")
    failed = json.loads(
        out["cli"]["list tasks --filter state=FAILED --format json --detail"]["output"]
    )
    run("get", "tasks", failed[0]["task_id"])
    run("list", "tasks", "--limit", "2", "--format", "json")
    run("get", "actors", actor_id)
    for resource in ("tasks", "actors", "objects"):
        run("summary", resource)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        alive = list_actors(
            address=url, filters=[("class_name", "=", "Counter"), ("state", "=", "ALIVE")]
        )
        out["sdk"]["alive_counters"] = [a.actor_id for a in alive]
        out["sdk"]["not_finished"] = len(
            list_tasks(address=url, filters=[("state", "!=", "FINISHED")], limit=1000)
        )
        got = get_actor(actor_id, address=url)
        out["sdk"]["get_actor"] = {"class_name": got.class_name, "name": got.name} if got else None
        out["sdk"]["jobs_api_version"] = JobSubmissionClient(url).get_version()
    return out


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2])))
