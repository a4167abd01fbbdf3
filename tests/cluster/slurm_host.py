"""A real single-host Slurm for tests: ``munged`` (Slurm's authentication, with a key made
here), ``slurmctld`` and ``slurmd`` from Debian's ``slurm-wlm``, all on a ``slurm.conf``
written into a temp dir with free ports, started and stopped by the fixture, which leaves no
process, job or file behind. Clients find it by ``SLURM_CONF`` (``SlurmHost.env``)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import pytest
from ember_test_utils import free_port

DAEMONS = ("slurmctld", "slurmd", "munged", "sbatch", "squeue", "scancel", "scontrol")


class SlurmHost:
    def __init__(self, cpus: int = 4) -> None:
        self.root = tempfile.mkdtemp(prefix="esl", dir="/tmp")
        self.cpus = cpus
        self.host = socket.gethostname().split(".")[0]
        self.conf = os.path.join(self.root, "slurm.conf")
        self.env = {**os.environ, "SLURM_CONF": self.conf}
        self._procs: list[subprocess.Popen] = []

    def _write_conf(self) -> None:
        munge = os.path.join(self.root, "munge")
        for d in ("state", "spool", "munge"):
            os.makedirs(os.path.join(self.root, d), mode=0o700)
        with open(os.path.join(munge, "munge.key"), "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(os.path.join(munge, "munge.key"), 0o400)
        r = self.root
        lines = [
            "ClusterName=embertest",
            f"SlurmctldHost={self.host}(127.0.0.1)",
            f"SlurmctldPort={free_port()}",
            f"SlurmdPort={free_port()}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={munge}/munge.socket",
            f"StateSaveLocation={r}/state",
            f"SlurmdSpoolDir={r}/spool",
            f"SlurmctldPidFile={r}/slurmctld.pid",
            f"SlurmdPidFile={r}/slurmd.pid",
            f"SlurmctldLogFile={r}/slurmctld.log",
            f"SlurmdLogFile={r}/slurmd.log",
            # No cgroups here: processes tracked by parentage, no task confinement.
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU",
            "MpiDefault=none",
            "ReturnToService=2",
            "KillWait=5",  # SIGTERM, then SIGKILL 5 s later (Slurm's default is 30)
            "InactiveLimit=0",
            # The node is what this file says, whatever this VM has.
            "SlurmdParameters=config_overrides",
            f"NodeName={self.host} NodeAddr=127.0.0.1 CPUs={self.cpus} RealMemory=4000 "
            "State=UNKNOWN",
            f"PartitionName=debug Nodes={self.host} Default=YES MaxTime=INFINITE State=UP",
        ]
        with open(self.conf, "w") as f:
            f.write("\n".join(lines) + "\n")

    def _start(self, argv: list[str], log: str) -> None:
        with open(os.path.join(self.root, log), "ab") as out:
            self._procs.append(
                subprocess.Popen(argv, stdout=out, stderr=out, env=self.env, start_new_session=True)
            )

    def run(self, *argv: str, timeout: float = 30) -> subprocess.CompletedProcess:
        return subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout, env=self.env
        )

    def setup(self) -> None:
        self._write_conf()
        munge = os.path.join(self.root, "munge")
        self._start(
            [
                "munged",
                "--foreground",
                "--force",
                f"--key-file={munge}/munge.key",
                f"--socket={munge}/munge.socket",
                f"--pid-file={munge}/munged.pid",
                f"--log-file={munge}/munged.log",
                f"--seed-file={munge}/munged.seed",
            ],
            "munged.out",
        )
        self._wait(lambda: os.path.exists(f"{munge}/munge.socket"), "munged's socket")
        self._start(["slurmctld", "-D", "-i", "-f", self.conf], "slurmctld.out")
        self._wait(lambda: self.run("scontrol", "ping").returncode == 0, "slurmctld")
        self._start(["slurmd", "-D", "-f", self.conf], "slurmd.out")
        self._wait(
            lambda: self.run("sinfo", "-h", "-o", "%t").stdout.strip() == "idle", "an idle node"
        )

    def _wait(self, ready, what: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            dead = [p.args[0] for p in self._procs if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                raise RuntimeError(f"{what} not up ({', '.join(dead)} exited):\n{self.logs()}")
            time.sleep(0.2)

    def logs(self) -> str:
        out = []
        for name in ("slurmctld.log", "slurmd.log", "slurmctld.out", "slurmd.out", "munged.out"):
            path = os.path.join(self.root, name)
            if os.path.exists(path):
                with open(path, errors="replace") as f:
                    out.append(f"--- {name}\n{f.read()[-3000:]}")
        return "\n".join(out)

    def jobs(self) -> list[str]:
        """Every job Slurm lists (pending, running, completing), as 'ID STATE NAME'."""
        return self.run("squeue", "-h", "-o", "%i %T %j").stdout.split("\n")[:-1]

    def teardown(self) -> None:
        try:
            if self._procs and self._procs[0].poll() is None:
                self.run("scancel", "--full", "--user", "root")
                deadline = time.monotonic() + 30
                while self.jobs() and time.monotonic() < deadline:
                    time.sleep(0.5)
        finally:
            for proc in reversed(self._procs):  # slurmd, slurmctld, then munged
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGTERM)
                    try:
                        proc.wait(timeout=30)
                    except subprocess.TimeoutExpired:
                        os.killpg(proc.pid, signal.SIGKILL)
                        proc.wait()
            shutil.rmtree(self.root, ignore_errors=True)


def slurm_host():
    """A generator for a fixture: ``SlurmHost`` up, and everything stopped after."""
    missing = [d for d in DAEMONS if shutil.which(d) is None]
    if missing:
        pytest.skip(f"needs slurm-wlm and munge ({', '.join(missing)} missing; scripts/dev.sh)")
    host = SlurmHost()
    try:
        host.setup()
        yield host
    finally:
        host.teardown()
