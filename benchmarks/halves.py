"""The driver side of a side-by-side benchmark (``tune_compare.py``, ``serve_compare.py``):
each half runs the benchmark's own script again, ``--half ray|ember --json FILE``, in its
system's interpreter (Ray from the judge venv ``tests/tools/.ray-venv``, ``--ray-python`` or
``EMBER_RAY_PYTHON``; Ray is never a dependency of Ember), with no ``EMBER_*``/``RAY_*``
setting of the caller leaking in. Standard library only: Ray's interpreter imports it too.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


def default_ray_python() -> str | None:
    for candidate in (
        os.environ.get("EMBER_RAY_PYTHON", ""),
        str(REPO / "tests" / "tools" / ".ray-venv" / "bin" / "python"),
        str(HERE / ".ray-venv" / "bin" / "python"),
    ):
        if candidate and Path(candidate).exists():
            return candidate
    return None


def run_half(python: str, script: str, system: str, quick: bool) -> dict:
    """One half's results: ``script --half system`` in ``python``."""
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        cmd = [python, script, "--half", system, "--json", f.name]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("EMBER_", "RAY_"))}
        env["RAY_USAGE_STATS_ENABLED"] = "0"
        child = subprocess.Popen(cmd + (["--quick"] if quick else []), env=env, cwd=REPO)
        try:
            code = child.wait()
        finally:
            if child.poll() is None:
                # Interrupted (Ctrl-C, or a SIGTERM made SystemExit by ``stop_on_sigterm``):
                # the half is asked to stop, so its own cleanup stops the clusters it started.
                child.terminate()
                try:
                    child.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    child.kill()
                    child.wait()
        if code:
            raise subprocess.CalledProcessError(code, cmd)
        return json.loads(Path(f.name).read_text())


def stop_on_sigterm() -> None:
    """A SIGTERM (``timeout``, a CI job's end) becomes SystemExit, so ``finally`` blocks run:
    a half stops its clusters, the driver stops its half."""
    import signal

    def _exit(*_: object) -> None:
        raise SystemExit(143)

    signal.signal(signal.SIGTERM, _exit)


def run_halves(
    script: str, quick: bool, only: str | None, ray_python: str | None
) -> dict[str, dict] | None:
    """``{"ray": ..., "ember": ...}`` (Ray's first; ``only`` runs one), or None, said on
    stderr, when Ray's half is wanted and no Ray interpreter is found."""
    results: dict[str, dict] = {}
    if only != "ember":
        python = ray_python or default_ray_python()
        if not python:
            print(
                "No Ray interpreter: pass --ray-python or run scripts/dev.sh setup", file=sys.stderr
            )
            return None
        results["ray"] = run_half(python, script, "ray", quick)
    if only != "ray":
        results["ember"] = run_half(sys.executable, script, "ember", quick)
    return results


def machine_line(sizes: str) -> str:
    """The line every table starts with: the machine, the date, the load, the sizes run."""
    import platform
    import time

    load = os.getloadavg()
    return (
        f"machine: {platform.node()} {platform.machine()}, {os.cpu_count()} cores, kernel "
        f"{platform.release()}; date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
        f"load average: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; {sizes}"
    )


def half_parser(description: str, quick_help: str, ray_help: str) -> argparse.ArgumentParser:
    """The command line every side-by-side script takes: ``--json``, ``--quick``, ``--only``,
    ``--ray-python``, and the hidden ``--half`` its driver runs each half with."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--half", choices=["ray", "ember"], help=argparse.SUPPRESS)
    parser.add_argument("--json", default=None, help="write the results here")
    parser.add_argument("--quick", action="store_true", help=quick_help)
    parser.add_argument("--only", choices=["ray", "ember"], help="run one side only")
    parser.add_argument("--ray-python", default=None, help=ray_help)
    return parser
