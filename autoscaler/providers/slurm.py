"""``provider: {type: slurm, gcs_address}``: worker nodes as Slurm jobs. A node is one
``sbatch`` job whose script runs ``ember start --address HEAD --block`` (the node lives as long
as the job), ended with ``scancel`` and listed with ``squeue``. The Slurm job id is the node's
id. A job that Slurm ends by itself (its time limit, a preemption) drops out of ``squeue``,
and the autoscaler replaces it while demand remains.

Each job carries its cluster and node type twice: in its name (``ember-CLUSTER-TYPE``, for
people reading ``squeue``) and in its comment (JSON, for this provider), so a restarted
autoscaler finds its jobs even without its table; the table on the head (``state_dir``)
keeps only tags set later.

Per node type, ``node_config`` may give ``partition``, ``time`` (sbatch's ``--time``),
``account``, ``qos``, ``cpus_per_task`` (default: the type's ``CPU``) and ``sbatch_options``
(a list of extra sbatch arguments, each one argument, e.g. ``["--mem=8G"]``). Provider fields:
``gcs_address`` (or ``head_ip``/``gcs_port``), ``ember_command``, ``node_temp_dir`` (on the
compute nodes, ``/tmp/ember-slurm``), ``state_dir`` (scripts, job output, the table).

The cluster token reaches the job in its environment (sbatch exports the submitting
environment, ``--export=ALL``, Slurm's default), never on a command line or in the script.
"""

from __future__ import annotations

import getpass
import hashlib
import json
import os
import re
import shlex
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from typing import Any

from ember.autoscaler.command_runner import run_bounded
from ember.autoscaler.node_provider import (
    NODE_KIND_WORKER,
    TAG_CLUSTER_NAME,
    TAG_NODE_KIND,
    TAG_USER_NODE_TYPE,
    StartsEmberNodes,
)
from ember.autoscaler.providers.node_table import NodeTable
from ember.autoscaler.providers.start_args import (
    ember_command,
    ember_start_argv,
    gcs_address_of,
    join_token,
)

SLURM_TIMEOUT_S = 30.0  # sbatch, squeue, scancel: each answers within this or fails
# node_tags/internal_ip reuse the last squeue this long: a tick asks for every node's tags,
# and one squeue per tick is what slurmctld should see from us, not one per node.
SQUEUE_REUSE_S = 2.0
JOB_ID = "@SLURM_JOB_ID@"  # in the script's argv: the job's own id, filled in by the shell
NODE_CONFIG_KEYS = ("partition", "time", "account", "qos", "cpus_per_task", "sbatch_options")
# squeue states of a job that is or will be a node; COMPLETING is one on its way out.
LIVE_STATES = frozenset(
    {"PENDING", "CONFIGURING", "RUNNING", "SUSPENDED", "RESIZING", "REQUEUED", "REQUEUE_HOLD"}
)


def _word(arg: str) -> str:
    """One shell word for ``arg``, with JOB_ID left to the shell as ``"$SLURM_JOB_ID"``."""
    return '"$SLURM_JOB_ID"'.join(shlex.quote(part) for part in arg.split(JOB_ID))


def job_script(argv: Sequence[str], cluster_name: str, node_type: str) -> str:
    """The batch script: checks the token arrived, then becomes the node (``exec``), so
    Slurm's signals (scancel, a time limit) reach ``ember start --block`` itself."""
    return (
        "#!/bin/sh\n"
        f"# One Ember worker node of cluster {cluster_name!r} (node type {node_type!r}),\n"
        "# written by Ember's slurm node provider.\n"
        ': "${EMBER_TOKEN:?no EMBER_TOKEN in the job environment: keep sbatch --export=ALL}"\n'
        f"exec {' '.join(_word(a) for a in argv)}\n"
    )


class SlurmNodeProvider(StartsEmberNodes):
    def __init__(self, provider_config: Mapping[str, Any], cluster_name: str) -> None:
        super().__init__(provider_config, cluster_name)
        cfg = self.provider_config
        self.gcs_address = gcs_address_of(cfg)
        self.ember = ember_command(cfg)
        self.node_temp_dir = str(cfg.get("node_temp_dir", "/tmp/ember-slurm"))
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", cluster_name)
        state = cfg.get("state_dir") or f"~/.ember/clusters/{safe}/slurm"
        self.state_dir = os.path.abspath(os.path.expanduser(str(state)))
        os.makedirs(self.state_dir, mode=0o700, exist_ok=True)
        self.table = NodeTable(os.path.join(self.state_dir, "slurm_nodes.json"))
        self.user = getpass.getuser()
        self._last_jobs: tuple[float, dict[str, dict[str, str]]] = (0.0, {})

    def _slurm(self, argv: list[str], env: Mapping[str, str] | None = None) -> Any:
        try:
            return run_bounded(argv, SLURM_TIMEOUT_S, env=env)
        except FileNotFoundError:
            raise RuntimeError(
                f"slurm provider: {argv[0]} is not installed on this machine (the autoscaler "
                "must run where Slurm's client commands work)"
            ) from None
        except subprocess.TimeoutExpired:
            raise RuntimeError(
                f"slurm provider: {argv[0]} gave no answer in {SLURM_TIMEOUT_S:g} s "
                "(is slurmctld up?)"
            ) from None

    def _comment(self, node_type: str) -> str:
        return json.dumps({"ember_cluster": self.cluster_name, "node_type": node_type})

    def _jobs(self, fresh: bool = True) -> dict[str, dict[str, str]]:
        """This cluster's live jobs: {job id: {state, nodelist, node_type}}; ``fresh=False``
        may answer from an squeue of the last SQUEUE_REUSE_S seconds."""
        when, jobs = self._last_jobs
        if not fresh and time.monotonic() - when < SQUEUE_REUSE_S:
            return jobs
        jobs = {j: job for j, job in self._squeue().items() if job["state"] in LIVE_STATES}
        self._last_jobs = (time.monotonic(), jobs)
        return jobs

    def listed_jobs(self) -> list[str]:
        """Every job of the cluster squeue still lists, in any state (a cancelled one stays
        COMPLETING while its node stops): what ``ember down`` waits to see gone."""
        return sorted(self._squeue())

    def _squeue(self) -> dict[str, dict[str, str]]:
        """This cluster's jobs squeue lists, in any state (known by their JSON comment)."""
        done = self._slurm(["squeue", "--noheader", f"--user={self.user}", "--format=%i|%T|%N|%k"])
        if done.returncode != 0:
            raise RuntimeError(f"slurm provider: squeue failed: {done.stderr.strip()[-1000:]}")
        jobs = {}
        for line in done.stdout.splitlines():
            parts = line.strip().split("|", 3)
            if len(parts) != 4:
                continue
            try:
                comment = json.loads(parts[3])
            except ValueError:
                continue  # not one of ours
            if not isinstance(comment, dict) or comment.get("ember_cluster") != self.cluster_name:
                continue
            jobs[parts[0]] = {
                "state": parts[1],
                "nodelist": parts[2],
                "node_type": str(comment.get("node_type", "")),
            }
        return jobs

    def _tags(self, job_id: str, job: Mapping[str, str], table: Mapping[str, Any]) -> dict:
        tags = {
            TAG_CLUSTER_NAME: self.cluster_name,
            TAG_NODE_KIND: NODE_KIND_WORKER,
            TAG_USER_NODE_TYPE: job["node_type"],
        }
        tags.update(table.get(job_id, {}).get("tags", {}))
        return tags

    def non_terminated_nodes(self, tag_filters: Mapping[str, str]) -> list[str]:
        jobs = self._jobs()
        table = self.table.read()
        if set(table) - set(jobs):
            with self.table.change() as nodes:  # jobs that ended: forget their tags
                for gone in set(nodes) - set(jobs):
                    del nodes[gone]
        return [
            job_id
            for job_id, job in jobs.items()
            if all(self._tags(job_id, job, table).get(k) == v for k, v in tag_filters.items())
        ]

    def node_tags(self, node_id: str) -> dict[str, str]:
        job = self._jobs(fresh=False).get(node_id)
        if job is None:
            return dict(self.table.read().get(node_id, {}).get("tags", {}))
        return self._tags(node_id, job, self.table.read())

    def set_node_tags(self, node_id: str, tags: Mapping[str, str]) -> None:
        with self.table.change() as nodes:
            nodes.setdefault(node_id, {"tags": {}})["tags"].update(tags)

    def internal_ip(self, node_id: str) -> str:
        """The job's host as an IP, or "" while the job waits for one."""
        job = self._jobs(fresh=False).get(node_id)
        host = (job or {}).get("nodelist", "")
        if not host or host.startswith("("):  # squeue shows a pending job's reason there
            return ""
        try:
            return socket.gethostbyname(host)
        except OSError:
            return host

    def sbatch_argv(
        self, node_config: Mapping[str, Any], node_type: str, resources: Mapping[str, float]
    ) -> list[str]:
        """sbatch's arguments for one node of a type (the script path is appended)."""
        unknown = sorted(set(node_config) - set(NODE_CONFIG_KEYS))
        if unknown:
            raise ValueError(
                f"node_config of {node_type!r}: unknown field(s) {', '.join(unknown)} for the "
                f"slurm provider; known: {', '.join(NODE_CONFIG_KEYS)}"
            )
        argv = [
            "sbatch",
            "--parsable",
            f"--job-name=ember-{self.cluster_name}-{node_type}",
            f"--comment={self._comment(node_type)}",
            "--nodes=1",
            "--ntasks=1",
            f"--output={self.state_dir}/slurm-%j.out",
        ]
        cpus = node_config.get("cpus_per_task", resources.get("CPU"))
        if cpus:
            argv.append(f"--cpus-per-task={int(cpus)}")
        for key in ("partition", "time", "account", "qos"):
            if node_config.get(key) is not None:
                argv.append(f"--{key}={node_config[key]}")
        extra = node_config.get("sbatch_options", [])
        if not isinstance(extra, list) or not all(isinstance(x, str) for x in extra):
            raise ValueError(f"node_config.sbatch_options of {node_type!r} must be a list")
        return argv + extra

    def create_node_with_resources_and_labels(
        self,
        node_config: Mapping[str, Any],
        tags: Mapping[str, str],
        count: int,
        resources: Mapping[str, float],
        labels: Mapping[str, str],
    ) -> dict[str, dict[str, Any]]:
        node_type = tags.get(TAG_USER_NODE_TYPE, "worker")
        argv = ember_start_argv(
            self.ember,
            self.gcs_address,
            f"{self.node_temp_dir}/{JOB_ID}",
            JOB_ID,
            tags,
            resources,
            labels,
        )
        script = job_script(argv, self.cluster_name, node_type)
        # One file per distinct script: what ran is kept beside the job's output.
        digest = hashlib.sha256(script.encode()).hexdigest()[:12]
        path = os.path.join(self.state_dir, f"ember-node-{digest}.sh")
        with open(path + ".tmp", "w") as f:
            f.write(script)
        os.chmod(path + ".tmp", 0o700)
        os.replace(path + ".tmp", path)
        sbatch = [*self.sbatch_argv(node_config, node_type, resources), path]
        env = {**os.environ, "EMBER_TOKEN": join_token(self.provider_config, self.gcs_address)}
        made: dict[str, dict[str, Any]] = {}
        for _ in range(count):
            done = self._slurm(sbatch, env=env)
            if done.returncode != 0:
                why = (done.stderr or done.stdout).strip()[-1000:]
                raise RuntimeError(
                    f"slurm provider: sbatch refused the job after {len(made)} of {count}: {why}"
                )
            job_id = done.stdout.strip().split(";")[0]
            with self.table.change() as nodes:
                nodes[job_id] = {"tags": dict(tags)}
            made[job_id] = {"tags": dict(tags), "script": path}
        self._last_jobs = (0.0, {})  # the next look sees the new jobs
        return made

    def terminate_node(self, node_id: str) -> None:
        done = self._slurm(["scancel", node_id])
        gone = "Invalid job id" in done.stderr
        if done.returncode != 0 and not gone:
            raise RuntimeError(f"slurm provider: scancel {node_id}: {done.stderr.strip()}")
        with self.table.change() as nodes:
            nodes.pop(node_id, None)
        self._last_jobs = (0.0, {})
