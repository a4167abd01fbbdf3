"""One set of Tune programs run on Ray Tune 2.60 and on ember.tune:

    tests/tools/.ray-venv/bin/python tests/tools/ray_tune_programs.py ray
    .venv/bin/python tests/tools/ray_tune_programs.py ember

prints one JSON object on its last line: per case, what a user reads (trial count, statuses,
configs, metrics, result keys in order, progress.csv headers, files per trial, errors), with
trial ids and dates replaced so that both runtimes' answers compare equal. The runtime is
imported by the name given, as a migrated program does (``import ember as ray``,
``from ember import tune``). ``tests/test_tune_ray_compare.py`` compares the two.
"""

from __future__ import annotations

import csv
import importlib
import json
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

DATE = re.compile(r"\d{4}-\d\d-\d\d_\d\d-\d\d-\d\d")
# Files only one side writes by design: Ray's TensorBoard events (not in ember.tune yet).
SKIP_FILES = re.compile(r"events\.out\.tfevents\..*")


def make_functions(tune: Any, scratch: str) -> dict:
    """The function trainables, closing over the runtime's tune (so that its workers, which
    unpickle them, report through the same module)."""

    def fn_grid_random(config):
        for i in range(3):
            checkpoint = None
            if i == 2:
                d = Path(tempfile.mkdtemp(dir=scratch))
                (d / "state.txt").write_text(str(i))
                checkpoint = tune.Checkpoint.from_directory(str(d))
            tune.report({"score": config["x"] * (i + 1), "lr": config["lr"]}, checkpoint=checkpoint)

    def failing(config):
        tune.report({"v": 1})
        if config["x"] == 2:
            raise ValueError(f"boom {config['x']}")
        tune.report({"v": 2})

    def curve(config):
        for i in range(12):
            tune.report({"acc": config["q"] * (i + 1), "flat": 1.0})

    return {"fn_grid_random": fn_grid_random, "failing": failing, "curve": curve}


def make_counter(tune: Any) -> type:
    class Counter(tune.Trainable):
        def setup(self, config):
            self.step_size = config["step"]
            self.total = 0

        def step(self):
            self.total += self.step_size
            return {"total": self.total}

        def save_checkpoint(self, checkpoint_dir):
            Path(checkpoint_dir, "total").write_text(str(self.total))

        def load_checkpoint(self, checkpoint_dir):
            self.total = int(Path(checkpoint_dir, "total").read_text())

    return Counter


def trial_files(path: str, trial_id: str) -> list[str]:
    out = []
    for root, _dirs, files in os.walk(path):
        for name in files:
            if SKIP_FILES.fullmatch(name):
                continue
            out.append(os.path.relpath(os.path.join(root, name), path))
    return sorted(out)


def describe(grid: Any) -> dict:
    """What a user reads of a ResultGrid, with ids and dates made neutral."""
    trials = []
    for result in sorted(grid, key=lambda r: r.metrics.get("experiment_tag", r.path or "")):
        m = result.metrics
        tid = m.get("trial_id", "")
        path = Path(result.path)
        rows = [json.loads(line) for line in (path / "result.json").read_text().splitlines()]
        with open(path / "progress.csv", newline="") as f:
            header = next(csv.reader(f), [])
        error = result.error
        trials.append(
            {
                "dir": DATE.sub("DATE", path.name.replace(tid, "ID")),
                "status": "ERROR" if error is not None else "TERMINATED",
                "config": result.config,
                "iterations": m.get("training_iteration"),
                "last": {
                    k: v for k, v in m.items() if k in ("score", "lr", "total", "v", "acc", "done")
                },
                "result_keys": list(rows[0]),
                "last_row_done": rows[-1].get("done"),
                "csv_header": header,
                "files": trial_files(str(path), tid),
                "checkpoint": Path(result.checkpoint.path).name if result.checkpoint else None,
                "checkpoint_dir_names": [r.get("checkpoint_dir_name") for r in rows],
                "error_is_cause_type": isinstance(error, ValueError) if error is not None else None,
                "error_txt_last_line": (
                    (path / "error.txt").read_text().strip().splitlines()[-1]
                    if (path / "error.txt").exists()
                    else None
                ),
                "error_txt_first_words": (
                    (path / "error.txt").read_text().split(" (occurred")[0]
                    if (path / "error.txt").exists()
                    else None
                ),
            }
        )
    return {
        "count": len(grid),
        "errors": grid.num_errors,
        "terminated": grid.num_terminated,
        "trials": trials,
    }


def raised(fn: Any) -> list:
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - the error is the answer
        return [type(e).__name__]
    return ["no error"]


def main(name: str) -> None:
    runtime = importlib.import_module(name)
    tune = importlib.import_module(f"{name}.tune")
    storage = tempfile.mkdtemp(prefix=f"tune-compare-{name}-")
    fns = make_functions(tune, storage)
    fn_grid_random, failing, curve = fns["fn_grid_random"], fns["failing"], fns["curve"]
    basic = importlib.import_module(f"{name}.tune.search.basic_variant").BasicVariantGenerator
    schedulers = importlib.import_module(f"{name}.tune.schedulers")
    stopper = importlib.import_module(f"{name}.tune.stopper")
    runtime.init(num_cpus=4)
    same: dict[str, Any] = {}
    own: dict[str, Any] = {}
    seconds: dict[str, float] = {}

    def rc(exp: str, **kw: Any) -> Any:
        return tune.RunConfig(name=exp, storage_path=storage, verbose=0, **kw)

    def case(label: str, fn: Any) -> None:
        started = time.monotonic()
        try:
            same[label] = fn()
        except Exception as e:  # noqa: BLE001 - a case that crashes is reported, not fatal
            same[label] = {"crashed": f"{type(e).__name__}: {e}"}
        seconds[label] = round(time.monotonic() - started, 1)

    case(
        "fn_grid_random",
        lambda: describe(
            tune.Tuner(
                fn_grid_random,
                param_space={
                    "x": tune.grid_search([1, 2]),
                    "lr": tune.loguniform(1e-4, 1e-1),
                    "double": tune.sample_from(lambda config: config["x"] * 2),
                },
                tune_config=tune.TuneConfig(
                    num_samples=2, metric="score", mode="max", search_alg=basic(random_state=7)
                ),
                run_config=rc("fn"),
            ).fit()
        ),
    )

    case(
        "class_checkpoints",
        lambda: describe(
            tune.Tuner(
                make_counter(tune),
                param_space={"step": tune.grid_search([1, 10])},
                run_config=rc(
                    "cls",
                    stop={"training_iteration": 5},
                    checkpoint_config=tune.CheckpointConfig(
                        num_to_keep=2, checkpoint_frequency=2, checkpoint_at_end=True
                    ),
                ),
            ).fit()
        ),
    )

    case(
        "failing_trial",
        lambda: describe(
            tune.Tuner(
                failing,
                param_space={"x": tune.grid_search([1, 2])},
                run_config=rc("err"),
            ).fit()
        ),
    )

    case(
        "asha",
        lambda: describe(
            tune.Tuner(
                curve,
                param_space={"q": tune.grid_search([3, 2, 1])},
                tune_config=tune.TuneConfig(
                    metric="acc",
                    mode="max",
                    max_concurrent_trials=1,
                    scheduler=schedulers.ASHAScheduler(
                        max_t=12, grace_period=2, reduction_factor=2
                    ),
                ),
                run_config=rc("asha"),
            ).fit()
        ),
    )

    case(
        "stoppers",
        lambda: {
            "max_iter": describe(
                tune.Tuner(
                    curve,
                    param_space={"q": 1},
                    run_config=rc("s1", stop=stopper.MaximumIterationStopper(4)),
                ).fit()
            ),
            "plateau": describe(
                tune.Tuner(
                    curve,
                    param_space={"q": 1},
                    run_config=rc(
                        "s2",
                        stop=stopper.TrialPlateauStopper(
                            "flat", std=0.01, num_results=3, grace_period=3
                        ),
                    ),
                ).fit()
            ),
            "combined_and_callable": describe(
                tune.Tuner(
                    curve,
                    param_space={"q": 2},
                    run_config=rc(
                        "s3",
                        stop=stopper.CombinedStopper(
                            stopper.MaximumIterationStopper(9),
                            stopper.FunctionStopper(lambda tid, r: r["acc"] >= 10),
                        ),
                    ),
                ).fit()
            ),
            "dict": describe(
                tune.Tuner(
                    curve,
                    param_space={"q": 3},
                    run_config=rc("s4", stop={"acc": 7}),
                ).fit()
            ),
        },
    )

    def analysis() -> dict:
        a = tune.run(
            curve,
            config={"q": tune.grid_search([1, 2])},
            metric="acc",
            mode="max",
            storage_path=storage,
            name="run",
            verbose=0,
            stop={"training_iteration": 2},
        )
        frames = list(a.trial_dataframes.values())
        return {
            "best_config": a.best_config,
            "best_result_acc": a.best_result["acc"],
            "best_result_keys": sorted(a.best_result),
            "dataframe_columns": sorted(a.dataframe().columns),
            "results_df_columns": sorted(a.results_df.columns),
            "results_df_index": a.results_df.index.name,
            "trial_dataframe_columns": sorted(frames[0].columns),
            "trial_dataframe_rows": [len(f) for f in frames],
            "best_config_min": a.get_best_config(metric="acc", mode="min"),
        }

    case("tune_run_analysis", analysis)

    blocker = Path(storage, "a_file")
    blocker.write_text("")
    case(
        "bad_input",
        lambda: {
            "asha_without_metric": raised(
                lambda: tune.Tuner(
                    curve,
                    tune_config=tune.TuneConfig(scheduler=schedulers.ASHAScheduler()),
                    run_config=rc("nometric"),
                ).fit()
            ),
        },
    )
    own["mode_typo"] = raised(lambda: tune.TuneConfig(mode="maximum"))
    own["unwritable_storage"] = raised(
        lambda: tune.Tuner(
            curve,
            run_config=tune.RunConfig(storage_path=str(blocker), name="x", verbose=0),
        ).fit()
    )
    own["experiment_files"] = sorted(
        DATE.sub("DATE", p.name) for p in Path(storage, "fn").iterdir() if p.is_file()
    )
    print(json.dumps({"same": same, "own": own, "seconds": seconds}))
    runtime.shutdown()
    shutil.rmtree(storage, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1])
