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
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

DATE = re.compile(r"\d{4}-\d\d-\d\d_\d\d-\d\d-\d\d")
# A TensorBoard event file is named by its time and host: compared as one neutral name.
EVENTS = re.compile(r"events\.out\.tfevents\..*")
# TensorBoard's own reader, run in the judge venv (TensorBoard is no dependency of Ember).
TB_READ = [
    str(Path(__file__).parent / ".ray-venv" / "bin" / "python"),
    str(Path(__file__).parent / "tb_read.py"),
]


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

    def sigkilled(config):
        """Checkpoints each step; SIGKILLs its own worker process after the step-1 checkpoint
        as many times as config["kills"] says (counted in files, across restarts)."""
        start = 0
        checkpoint = tune.get_checkpoint()
        if checkpoint:
            with checkpoint.as_directory() as d:
                start = int(Path(d, "i").read_text()) + 1
        for i in range(start, 4):
            d = Path(tempfile.mkdtemp(dir=scratch))
            (d / "i").write_text(str(i))
            tune.report(
                {"i": i, "resumed_at": start}, checkpoint=tune.Checkpoint.from_directory(str(d))
            )
            marks = Path(scratch, f"kills-{config['kills']}")
            marks.mkdir(exist_ok=True)
            if i == start + 1 and len(list(marks.iterdir())) < config["kills"]:
                (marks / str(os.getpid())).write_text("")
                os.kill(os.getpid(), signal.SIGKILL)

    return {
        "fn_grid_random": fn_grid_random,
        "failing": failing,
        "curve": curve,
        "sigkilled": sigkilled,
    }


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
            name = EVENTS.sub("events.out.tfevents.*", name)
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


def tensorboard(experiment: Path) -> list[dict]:
    """What TensorBoard reads of each trial's event files: scalar tags, the score curve,
    the hparams and their metric tags (trials in tag order)."""
    dirs = sorted(
        (p for p in experiment.iterdir() if p.is_dir()),
        key=lambda p: p.name.split("_", 4)[-1],
    )
    done = subprocess.run([*TB_READ, *map(str, dirs)], capture_output=True, text=True, timeout=120)
    if done.returncode:
        return [{"tb_read failed": done.stderr.strip().splitlines()[-1:]}]
    read = json.loads(done.stdout)
    return [
        {
            "files": read[str(d)]["files"],
            "tags": sorted(read[str(d)]["scalars"]),
            "score": read[str(d)]["scalars"].get("ray/tune/score"),
            "hparams": read[str(d)]["hparams"],
            "metrics": read[str(d)]["metrics"],
        }
        for d in dirs
    ]


def searcher_spaces(name: str, tune: Any) -> dict:
    """Each library searcher's conversion of each kind of domain: Optuna's distribution, or
    the error (HyperOpt's converted expressions are compared by kind only)."""
    spaces = {
        "uniform": tune.uniform(-1, 2),
        "quniform": tune.quniform(0, 1, 0.25),
        "loguniform": tune.loguniform(1e-3, 1),
        "randint": tune.randint(0, 10),
        "qrandint": tune.qrandint(0, 10, 2),
        "lograndint": tune.lograndint(1, 100),
        "choice": tune.choice(["a", "b"]),
        "randn": tune.randn(0, 1),
        "sample_from": tune.sample_from(lambda _: 1),
        "grid": tune.grid_search([1, 2]),
    }
    out = {}
    for module, cls in (("optuna", "OptunaSearch"), ("hyperopt", "HyperOptSearch")):
        searcher = getattr(importlib.import_module(f"{name}.tune.search.{module}"), cls)
        for label, domain in spaces.items():
            try:
                converted = searcher.convert_search_space({"x": domain})["x"]
                out[f"{module}.{label}"] = repr(converted) if module == "optuna" else "converted"
            except Exception as e:  # noqa: BLE001 - the error is the answer
                out[f"{module}.{label}"] = f"{type(e).__name__}: {e}"
    return out


def train_spellings(name: str, tune: Any, storage: str) -> dict:
    """A trial written with Ray 2.60's ``ray.train`` spellings (report, get_checkpoint,
    get_context, Checkpoint)."""
    train = importlib.import_module(f"{name}.train")

    def fn(config):
        ctx = train.get_context()
        d = Path(tempfile.mkdtemp(dir=storage))
        (d / "x").write_text(str(config["x"]))
        train.report(
            {
                "score": config["x"],
                "had_checkpoint": train.get_checkpoint() is not None,
                "context": [
                    ctx.get_trial_name().endswith(ctx.get_trial_id()),
                    ctx.get_experiment_name(),
                    Path(ctx.get_trial_dir()).name.startswith(ctx.get_trial_name()),
                    ctx.get_world_size(),
                    ctx.get_world_rank(),
                    ctx.get_local_rank(),
                ],
            },
            checkpoint=train.Checkpoint.from_directory(str(d)),
        )

    grid = tune.Tuner(
        fn,
        param_space={"x": tune.grid_search([1, 2])},
        # Ray 2.60's Tuner wants tune's RunConfig (its train.RunConfig fails in Tuner).
        run_config=tune.RunConfig(name="train", storage_path=storage, verbose=0),
    ).fit()
    return {
        "statuses": [r.status if hasattr(r, "status") else repr(r.error) for r in grid],
        "errors": [type(r.error).__name__ if r.error else None for r in grid],
        "scores": [r.metrics.get("score") for r in grid],
        "context": [r.metrics.get("context") for r in grid],
        "checkpoints": [Path(r.checkpoint.path).name if r.checkpoint else None for r in grid],
        "is_train_result": isinstance(grid[0], train.Result),
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

    case("tensorboard", lambda: tensorboard(Path(storage, "fn")))

    def killed() -> dict:
        grid = tune.Tuner(
            fns["sigkilled"],
            param_space={"kills": tune.grid_search([1, 2])},
            run_config=rc("killed", failure_config=tune.FailureConfig(max_failures=1)),
        ).fit()
        out = []
        before_restore = []
        for result in sorted(grid, key=lambda r: r.config["kills"]):
            rows = [
                json.loads(x) for x in Path(result.path, "result.json").read_text().splitlines()
            ]
            rows = [(r["i"], r["resumed_at"], r["training_iteration"]) for r in rows]
            last_start = max(row[1] for row in rows)
            # Ray 2.60 copies result.json from the trial's storage over its local copy when
            # the trial restores; with a local storage path that is the same file, so the
            # rows written before the kill are sometimes lost (a race in Ray). Compared: the
            # rows since the last restore; the rows before it are each runtime's own answer.
            before_restore.append([row for row in rows if row[1] < last_start])
            text = Path(result.path, "error.txt").read_text()
            out.append(
                {
                    "status": "ERROR" if result.error is not None else "TERMINATED",
                    "rows": [row for row in rows if row[1] == last_start],
                    "failures_in_error_txt": text.count("Failure # "),
                    "error_class": type(result.error).__name__ if result.error else None,
                }
            )
        own["sigkilled_rows_before_restore"] = before_restore
        return {"trials": out, "errors": grid.num_errors}

    case("sigkilled_worker", killed)
    case("searcher_spaces", lambda: searcher_spaces(name, tune))
    # Ray 2.60 refuses ray.train.report inside a Tune trial (a DeprecationWarning raised, the
    # trial ERROR); Ember takes the spellings earlier Ray 2.x programs use: its own answer.
    try:
        own["train_spellings"] = train_spellings(name, tune, storage)
    except Exception as e:  # noqa: BLE001 - the error is the answer
        own["train_spellings"] = {"crashed": f"{type(e).__name__}: {e}"}

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
    # Shut down first: Ray forwards its workers' and raylet's messages (the SIGKILLed worker's)
    # to stdout asynchronously, and the JSON must be the last line.
    runtime.shutdown()
    print(json.dumps({"same": same, "own": own, "seconds": seconds}), flush=True)
    shutil.rmtree(storage, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1])
