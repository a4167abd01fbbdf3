#!/usr/bin/env python3
"""Make a virtual environment holding Ray, apart from Ember's: Ray is never a dependency of
Ember, only an outside judge (the benchmarks measure it, the tests run its clients).

    python3 scripts/ray_venv.py tests/tools/.ray-venv 'ray[default,tune]==2.60.0'

Idempotent: an environment whose Ray already imports is left as it is. The benchmarks
(``benchmarks/compare_ray.py``) and ``scripts/dev.sh`` both call ``ensure_ray_venv`` here.
This module needs only the standard library.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path


class RayVenvError(RuntimeError):
    """Ray could not be installed, or does not import once installed."""


def ensure_ray_venv(
    venv: Path,
    requirements: Sequence[str],
    fallback: Sequence[str] = (),
    check_imports: str = "ray",
) -> Path:
    """The python of ``venv``, created with ``requirements`` (or ``fallback`` when those
    cannot be installed) unless ``import <check_imports>`` already works there."""
    py = venv / "bin" / "python"
    check = [str(py), "-c", f"import {check_imports}; print(ray.__version__)"]
    if py.exists() and subprocess.run(check, capture_output=True, text=True).returncode == 0:
        return py
    if not py.exists():
        print(f"creating {venv} ...", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(py), "-m", "pip", "install", "--disable-pip-version-check", "--quiet"]
    print(f"installing {' '.join(requirements)} into {venv} ...", flush=True)
    if subprocess.run([*pip, *requirements]).returncode != 0:
        if not fallback:
            raise RayVenvError(f"could not install {' '.join(requirements)} into {venv}")
        print(f"not available; trying {' '.join(fallback)}", flush=True)
        if subprocess.run([*pip, *fallback]).returncode != 0:
            raise RayVenvError(f"could not install Ray into {venv}")
    done = subprocess.run(check, capture_output=True, text=True)
    if done.returncode != 0:
        raise RayVenvError(f"Ray does not import in {venv}: {done.stderr.strip()}")
    return py


def main(argv: Sequence[str]) -> int:
    if len(argv) < 2:
        print("usage: ray_venv.py VENV REQUIREMENT...", file=sys.stderr)
        return 2
    try:
        # Each extra requirement must import too (joblib: Ray's joblib backend, compared
        # with Ember's), or an environment made before it was listed would lack it.
        extra = [r.split("=")[0].split("[")[0].split(">")[0] for r in argv[2:]]
        # Ray's own extras that add a library must import too: ray[tune] is ray.tune (its
        # dependencies are what the extra installs; an older environment lacks them).
        ray_extras = argv[1].partition("[")[2].partition("]")[0].split(",")
        libraries = [f"ray.{e.strip()}" for e in ray_extras if e.strip() in ("tune", "serve")]
        imports = ", ".join(["ray", *libraries, *extra])
        py = ensure_ray_venv(Path(argv[0]), argv[1:], check_imports=imports)
    except RayVenvError as e:
        print(f"ray_venv: {e}", file=sys.stderr)
        return 1
    print(f"Ray is ready: {py}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
