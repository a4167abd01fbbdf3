#!/usr/bin/env python3
"""Ray Tune 2.60 and ember.tune side by side on this machine (issue 30's performance targets).

Three workloads, the same code on both (the runtime imported by name, as a migrated program
does), each timed around ``Tuner.fit()`` on a fresh local node of 8 logical CPUs:

- bookkeeping: 1,000 trials of a trivial function trainable (one report each);
- result throughput: 8 concurrent trials each reporting 200 results/s for 30 s; its
  theoretical minimum is the 30 s (all trials run at once), so the row also gives
  wall / minimum (Ray's own acceptance: within 20%; Ember's target: 10%);
- PBT: 8 trials exploiting every 5 iterations, each iteration reporting a 10 MB checkpoint.

Each half runs in a subprocess of its own environment (Ray from the judge venv
``tests/tools/.ray-venv`` or ``--ray-python``; Ray is never a dependency of Ember)::

    .venv/bin/python benchmarks/tune_compare.py            # full sizes (~3 min per side)
    .venv/bin/python benchmarks/tune_compare.py --quick    # 100 trials, 5 s, 10 iterations
    .venv/bin/python benchmarks/tune_compare.py --quick --only ember
    .venv/bin/python benchmarks/tune_compare.py --workloads throughput,pbt

Only the standard library is imported at the top: Ray's interpreter runs this same file.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from halves import (  # benchmarks/: the script's own directory
    half_parser,
    machine_line,
    run_halves,
    stop_on_sigterm,
)

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SIZES = {
    "full": {"trials": 1000, "seconds": 30.0, "rate": 200, "pbt_iters": 30},
    "quick": {"trials": 100, "seconds": 5.0, "rate": 200, "pbt_iters": 10},
}
WORKLOADS = ("bookkeeping", "throughput", "pbt")
CONCURRENT = 8
CHECKPOINT_MB = 10
# Ember's targets from the issue: Ray's time / Ember's, and Ember's wall / the minimum.
TARGETS = {"bookkeeping": 5.0, "throughput": 2.0, "pbt": 2.0, "throughput_overhead": 1.10}


# --------------------------------------------------------------------------------------
# One half: runs inside Ray's or Ember's interpreter
# --------------------------------------------------------------------------------------


def trivial(config: dict) -> None:
    from_tune().report({"score": config["i"]})


def paced(config: dict) -> None:
    tune = from_tune()
    interval = 1.0 / config["rate"]
    start = time.time()
    for i in range(int(config["seconds"] * config["rate"])):
        tune.report({"i": i})
        wait = start + (i + 1) * interval - time.time()
        if wait > 0:
            time.sleep(wait)


def heavy_checkpoints(config: dict) -> None:
    tune = from_tune()
    start, blob = 0, None
    checkpoint = tune.get_checkpoint()
    if checkpoint:
        with checkpoint.as_directory() as d:
            start = json.loads(Path(d, "state.json").read_text())["step"] + 1
    for step in range(start, config["iters"]):
        score = config["lr"] * (step + 1)
        with tempfile.TemporaryDirectory() as d:
            Path(d, "state.json").write_text(json.dumps({"step": step}))
            blob = blob or os.urandom(CHECKPOINT_MB * 1024 * 1024)
            Path(d, "weights.bin").write_bytes(blob)
            tune.report({"score": score}, checkpoint=tune.Checkpoint.from_directory(d))


_TUNE: Any = None


def from_tune() -> Any:
    global _TUNE
    if _TUNE is None:
        _TUNE = importlib.import_module(f"{os.environ['TUNE_COMPARE_SYSTEM']}.tune")
    return _TUNE


def run_half(system: str, size: dict) -> dict:
    os.environ["TUNE_COMPARE_SYSTEM"] = system
    runtime = importlib.import_module(system)
    tune = from_tune()
    pbt_cls = importlib.import_module(f"{system}.tune.schedulers").PopulationBasedTraining
    storage = tempfile.mkdtemp(prefix=f"tune-bench-{system}-")
    runtime.init(num_cpus=CONCURRENT, include_dashboard=False)
    out: dict[str, Any] = {}
    chosen = os.environ.get("TUNE_COMPARE_WORKLOADS", ",".join(WORKLOADS)).split(",")

    def timed(name: str, trainable: Any, space: dict, **tc: Any) -> None:
        if name not in chosen:
            return
        tuner = tune.Tuner(
            trainable,
            param_space=space,
            tune_config=tune.TuneConfig(**tc),
            run_config=tune.RunConfig(name=name, storage_path=storage, verbose=0),
        )
        started = time.perf_counter()
        grid = tuner.fit()
        out[name] = {"seconds": time.perf_counter() - started, "errors": grid.num_errors}

    try:
        timed("bookkeeping", trivial, {"i": tune.grid_search(list(range(size["trials"])))})
        timed(
            "throughput",
            paced,
            {
                "seconds": size["seconds"],
                "rate": size["rate"],
                "n": tune.grid_search(list(range(CONCURRENT))),
            },
            max_concurrent_trials=CONCURRENT,
        )
        pbt = pbt_cls(
            time_attr="training_iteration",
            perturbation_interval=5,
            hyperparam_mutations={"lr": tune.uniform(0.001, 1.0)},
            metric="score",
            mode="max",
        )
        timed(
            "pbt",
            heavy_checkpoints,
            {"lr": tune.uniform(0.001, 1.0), "iters": size["pbt_iters"]},
            num_samples=CONCURRENT,
            scheduler=pbt,
        )
    finally:
        runtime.shutdown()
        import shutil

        shutil.rmtree(storage, ignore_errors=True)
    return out


# --------------------------------------------------------------------------------------
# The driver: both halves, then the table
# --------------------------------------------------------------------------------------


def table(results: dict[str, dict], size: dict) -> list[dict]:
    """One row per workload: each system's seconds, Ray/Ember, the target."""
    rows = []
    ran = [name for name in WORKLOADS if all(name in res for res in results.values())]
    for name in ran:
        row: dict[str, Any] = {"workload": name}
        for system, res in results.items():
            row[system] = round(res[name]["seconds"], 2)
            row[f"{system}_errors"] = res[name]["errors"]
        if "ray" in results and "ember" in results:
            row["ray/ember"] = round(row["ray"] / row["ember"], 2)
            row["target"] = f">= {TARGETS[name]:g}"
        rows.append(row)
    minimum = size["seconds"]
    for system, res in results.items() if "throughput" in ran else ():
        rows.append(
            {
                "workload": f"throughput wall / minimum ({system})",
                system: round(res["throughput"]["seconds"] / minimum, 3),
                "target": f"<= {TARGETS['throughput_overhead']:g}"
                if system == "ember"
                else "<= 1.2 (Ray's)",
            }
        )
    return rows


def print_table(rows: list[dict], size: dict, quick: bool) -> None:
    print(machine_line(f"sizes: {size} ({'--quick' if quick else 'full'})"))
    cols = ["workload", "ray", "ember", "ray/ember", "target"]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for row in rows:
        print("| " + " | ".join(str(row.get(c, "")) for c in cols) + " |")


def main(argv: list[str] | None = None) -> int:
    parser = half_parser(
        __doc__.split("\n")[0],
        "smaller sizes (a minute a side)",
        "the interpreter that has Ray Tune",
    )
    parser.add_argument(
        "--workloads",
        default=os.environ.get("TUNE_COMPARE_WORKLOADS", ",".join(WORKLOADS)),
        help="which to run, comma-separated (default: all three)",
    )
    args = parser.parse_args(argv)
    stop_on_sigterm()
    unknown = set(args.workloads.split(",")) - set(WORKLOADS)
    if unknown:
        parser.error(f"unknown workload(s) {sorted(unknown)}: choose from {', '.join(WORKLOADS)}")
    os.environ["TUNE_COMPARE_WORKLOADS"] = args.workloads  # each half reads it
    size = SIZES["quick" if args.quick else "full"]
    if args.half:
        result = run_half(args.half, size)
        Path(args.json).write_text(json.dumps(result))
        return 0
    results = run_halves(__file__, args.quick, args.only, args.ray_python)
    if results is None:
        return 2
    rows = table(results, size)
    print_table(rows, size, args.quick)
    if args.json:
        Path(args.json).write_text(json.dumps({"results": results, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
