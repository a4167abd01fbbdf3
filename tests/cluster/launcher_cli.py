"""What the ``ember up`` walks (test_cluster_launcher.py, test_launcher_*.py) share: the CLI as
a user types it, in a subprocess, and its output checked."""

from __future__ import annotations

import subprocess
import sys


def ember(env: dict, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    """``ember ARGS`` with ``env``, to its end (at most ``timeout`` seconds)."""
    return subprocess.run(
        [sys.executable, "-m", "ember.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def ok(done: subprocess.CompletedProcess) -> str:
    """The standard output of a command that must have succeeded (else both streams shown)."""
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout
