#!/usr/bin/env python3
"""Two-node workloads on Ray and on Ember, side by side, on this machine (issue 3 §4).

Each system forms a two-node cluster on loopback with its own test utility
(``ray.cluster_utils.Cluster`` / ``ember.cluster_utils.Cluster``: separate node processes,
ports and object stores), and the same code measures:

- transfer GB/s: a numpy array made by a task on the worker node, then ``get`` on the head's
  driver (a pull from the worker's store into the head's, then a zero-copy read);
- tasks/s across 2 nodes: batches of no-op tasks with ``scheduling_strategy="SPREAD"``;
- tasks/s on the remote node: batches of no-op tasks that must run on the worker node.

Each half runs in a subprocess of its own environment (Ray in ``benchmarks/.ray-venv``, or
``--ray-python``; Ray is never a dependency of Ember), one after the other::

    .venv/bin/python benchmarks/cluster_compare_ray.py
    .venv/bin/python benchmarks/cluster_compare_ray.py --quick
    .venv/bin/python benchmarks/cluster_compare_ray.py --ray-python /path/to/ray/venv/bin/python

Only the standard library is imported at the top: Ray's interpreter runs this same file.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
GIB = 1024**3
TARGET = 1.0  # Ember / Ray, higher is better, on every row


# --------------------------------------------------------------------------------------
# One half: runs inside Ray's or Ember's interpreter
# --------------------------------------------------------------------------------------


class _TwoNodes:
    """A head (the driver's node) and a worker node with a ``remote`` resource."""

    def __init__(self, system: str, store: int) -> None:
        self.system = system
        if system == "ray":
            import ray
            from ray.cluster_utils import Cluster

            self.lib = ray
            self.cluster = Cluster(
                initialize_head=True,
                head_node_args={"num_cpus": 1, "object_store_memory": store},
            )
            self.cluster.add_node(num_cpus=1, resources={"remote": 1}, object_store_memory=store)
            self.cluster.wait_for_nodes()
            ray.init(address=self.cluster.address, log_to_driver=False)
        else:
            import ember
            from ember.cluster_utils import Cluster

            self.lib = ember
            self.cluster = Cluster(
                initialize_head=True,
                head_node_args={"num_cpus": 1, "object_store_memory": store},
            )
            self.cluster.add_node(num_cpus=1, resources={"remote": 1}, object_store_memory=store)
            self.cluster.connect(log_to_driver=False)

    def close(self) -> None:
        self.lib.shutdown()
        self.cluster.shutdown()


def _transfer(lib: Any, size: int, trials: int) -> dict[str, Any]:
    import numpy as np

    @lib.remote(resources={"remote": 1})
    def make(n: int, seed: int):
        a = np.empty(n, dtype=np.uint8)
        a[::4096] = seed  # touch every page: the source copy is real memory
        return a

    rates = []
    for i in range(trials):
        ref = make.remote(size, i % 250)
        lib.wait([ref], timeout=300, fetch_local=False)  # made and sealed on the worker node
        start = time.perf_counter()
        value = lib.get(ref, timeout=300)
        elapsed = time.perf_counter() - start
        assert value.nbytes == size and int(value[4096]) == i % 250, "corrupt transfer"
        rates.append(size / elapsed / 1e9)
        del value, ref
        time.sleep(0.2)  # let the copy be freed before the next round
    rates.sort()
    return {"value": rates[len(rates) // 2], "unit": "GB/s", "trials": rates}


def _tasks(lib: Any, options: dict, batch: int, rounds: int) -> dict[str, Any]:
    @lib.remote
    def noop() -> int:
        return 0

    fn = noop.options(**options)
    lib.get([fn.remote() for _ in range(min(batch, 100))], timeout=300)  # warm leases
    rates = []
    for _ in range(rounds):
        start = time.perf_counter()
        lib.get([fn.remote() for _ in range(batch)], timeout=300)
        rates.append(batch / (time.perf_counter() - start))
    rates.sort()
    return {"value": rates[len(rates) // 2], "unit": "tasks/s", "trials": rates}


def run_half(system: str, quick: bool) -> dict[str, Any]:
    size = (256 * 1024**2) if quick else GIB
    store = size * 2 + 512 * 1024**2
    nodes = _TwoNodes(system, store)
    try:
        lib = nodes.lib
        results = {
            f"transfer {size // 1024**2} MiB numpy between nodes": _transfer(
                lib, size, 2 if quick else 5
            ),
            "tasks across 2 nodes (SPREAD)": _tasks(
                lib, {"scheduling_strategy": "SPREAD"}, 200 if quick else 1000, 2 if quick else 5
            ),
            "tasks on the remote node": _tasks(
                lib, {"resources": {"remote": 0.001}}, 200 if quick else 1000, 2 if quick else 5
            ),
        }
    finally:
        nodes.close()
    return {"system": system, "version": getattr(lib, "__version__", "?"), "rows": results}


# --------------------------------------------------------------------------------------
# The comparison: runs in Ember's interpreter
# --------------------------------------------------------------------------------------


def _default_ray_python() -> str:
    for candidate in (
        os.environ.get("EMBER_RAY_PYTHON"),
        str(HERE / ".ray-venv" / "bin" / "python"),
    ):
        if candidate and Path(candidate).exists():
            return candidate
    return ""


def _run_sub(python: str, system: str, quick: bool) -> dict[str, Any]:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = f.name
    cmd = [python, str(Path(__file__).resolve()), "--half", system, "--json", out]
    if quick:
        cmd.append("--quick")
    env = dict(os.environ)
    if system == "ray":
        env.pop("PYTHONPATH", None)
    print(f"running the {system} half: {' '.join(cmd)}", flush=True)
    done = subprocess.run(cmd, env=env, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"the {system} half failed (exit {done.returncode})")
    with open(out) as f:
        result = json.load(f)
    os.unlink(out)
    return result


def compare(ray: dict[str, Any], ember: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for name, e in ember["rows"].items():
        r = ray["rows"].get(name)
        ratio = e["value"] / r["value"] if r and r["value"] else None
        rows.append(
            {
                "workload": name,
                "unit": e["unit"],
                "ray": r["value"] if r else None,
                "ember": e["value"],
                "ratio": ratio,
                "meets_target": ratio is not None and ratio >= TARGET,
            }
        )
    return rows


def print_table(rows: list[dict[str, Any]]) -> None:
    print()
    print(f"{'workload':44} {'unit':8} {'Ray':>10} {'Ember':>10} {'Ember/Ray':>10}")
    for r in rows:
        ray = f"{r['ray']:.2f}" if r["ray"] is not None else "-"
        ratio = f"{r['ratio']:.2f}x" if r["ratio"] is not None else "-"
        flag = "" if r["meets_target"] else f"  (target {TARGET:.1f}x)"
        print(f"{r['workload']:44} {r['unit']:8} {ray:>10} {r['ember']:>10.2f} {ratio:>10}{flag}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--half", choices=["ray", "ember"], help=argparse.SUPPRESS)
    parser.add_argument("--json", default=None, help="write the results here")
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    parser.add_argument("--ray-python", default=None, help="the interpreter that has Ray")
    args = parser.parse_args(argv)
    if args.half:
        result = run_half(args.half, args.quick)
        with open(args.json, "w") as f:
            json.dump(result, f)
        return 0
    ray_python = args.ray_python or _default_ray_python()
    if not ray_python:
        print(
            "No Ray interpreter: pass --ray-python, set EMBER_RAY_PYTHON, or create "
            "benchmarks/.ray-venv (benchmarks/compare_ray.py does).",
            file=sys.stderr,
        )
        return 2
    ray = _run_sub(ray_python, "ray", args.quick)
    ember = _run_sub(sys.executable, "ember", args.quick)
    rows = compare(ray, ember)
    print_table(rows)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"ray": ray, "ember": ember, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
