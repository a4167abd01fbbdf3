#!/usr/bin/env python3
"""Run `ray microbenchmark`'s workloads on Ray and on Ember, side by side, on this machine.

Both halves run the same code, ``core/tools/microbenchmark/``: Ray's half in its own virtual
environment (``benchmarks/.ray-venv``, created on first use; Ray is never a dependency of
Ember), Ember's half in Ember's environment. Each half is a subprocess that writes JSON;
they run one after the other, then a table compares them::

    .venv/bin/python benchmarks/compare_ray.py              # both halves, full trials
    .venv/bin/python benchmarks/compare_ray.py --quick      # smoke run
    .venv/bin/python benchmarks/compare_ray.py --only ray   # Ray's numbers alone
    .venv/bin/python benchmarks/compare_ray.py --only ember --ray-results benchmarks/results/ray-....json
    .venv/bin/python benchmarks/compare_ray.py --interleave --rounds 3   # row by row, paired

This machine's speed drifts by 15-35% over minutes, and a whole half takes ~4 minutes, so
two halves run one after the other can see different machines. ``--interleave`` runs each
row on Ray and then on Ember (the order alternating), one row at a time, and with
``--rounds N`` repeats that N times: a row's ratio is then the median of its N paired
ratios, each from two runs a minute apart.

Every process a half starts carries a marker in its environment; after each half the
script looks for marked processes still alive, reports them and ends them.

This script needs only the standard library.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
# The one place that makes a Ray environment (the tests' set-up uses it too).
sys.path.insert(0, str(REPO / "scripts"))
import ray_venv as _ray_venv  # noqa: E402

MODULE = REPO / "core" / "tools" / "microbenchmark"  # a package, loaded from its folder
RAY_VENV = HERE / ".ray-venv"
RESULTS = HERE / "results"
RAY_REQUIREMENT = "ray==2.60.0"
RAY_FALLBACK_REQUIREMENT = "ray>=2,<3"
RUN_MARK_ENV = "EMBER_BENCH_RUN"

STARTUP_ROW = "init -> first task -> shutdown"
MEMORY_ROW = "idle local node resident memory"
# Ember's targets, as ratios where >1 means Ember is better (issue 32 raised them from 3x
# and 2x: the one-request-one-reply rows are where the machine allows most).
FAST_PATH_ROWS = {"single client tasks sync": 5.0, "1:1 actor calls sync": 5.0}
DEFAULT_TARGET = 3.0  # every other row at least three times Ray's
STARTUP_TARGET_S = 1.0
MEMORY_TARGET = 4.0

# Loads the package core/tools/microbenchmark/ from its folder, so no directory of Ember lands
# on sys.path (the Ray half runs where Ember is not installed).
LAUNCHER = (
    "import importlib.util, os, sys\n"
    "d = sys.argv[1]\n"
    "spec = importlib.util.spec_from_file_location(\n"
    "    'ember_microbenchmark', os.path.join(d, '__init__.py'), submodule_search_locations=[d]\n"
    ")\n"
    "mod = importlib.util.module_from_spec(spec)\n"
    "sys.modules[spec.name] = mod\n"
    "spec.loader.exec_module(mod)\n"
    "sys.exit(mod.main(sys.argv[2:]))\n"
)


class SetupError(RuntimeError):
    """A half cannot run at all (no Ray environment, Ember not built)."""


# --------------------------------------------------------------------------------------
# Environments
# --------------------------------------------------------------------------------------


def ray_python() -> Path:
    return RAY_VENV / "bin" / "python"


def ensure_ray_venv() -> Path:
    """Create benchmarks/.ray-venv with Ray, numpy and psutil unless it already works."""
    try:
        return _ray_venv.ensure_ray_venv(
            RAY_VENV,
            [RAY_REQUIREMENT, "numpy", "psutil"],
            [RAY_FALLBACK_REQUIREMENT, "numpy", "psutil"],
            check_imports="ray, numpy, psutil",
        )
    except _ray_venv.RayVenvError as e:
        raise SetupError(str(e)) from None


def default_ember_python() -> Path:
    venv = REPO / ".venv" / "bin" / "python"
    return venv if venv.exists() else Path(sys.executable)


def check_ember(py: Path) -> None:
    """Fail clearly when Ember's runtime has not landed yet."""
    code = (
        "import sys\n"
        "try:\n    import ember\nexcept ImportError as e:\n"
        "    print(f'cannot import ember: {e}'); sys.exit(3)\n"
        "sys.exit(0 if callable(getattr(ember, 'init', None)) else 4)\n"
    )
    done = subprocess.run([str(py), "-c", code], capture_output=True, text=True, cwd=RESULTS)
    if done.returncode == 4:
        raise SetupError(
            f"Ember's runtime is not built yet: `ember.init` does not exist (checked with "
            f"{py}). Measure Ray alone with --only ray."
        )
    if done.returncode != 0:
        raise SetupError(
            f"Ember is not importable with {py}: {(done.stdout + done.stderr).strip()}"
        )


# --------------------------------------------------------------------------------------
# Processes
# --------------------------------------------------------------------------------------


def marked_processes(mark: str, sid: int | None = None) -> dict[int, str]:
    """pid -> command line of every live process of a half: whose environment carries
    ``mark``, or that is in session ``sid`` (the half was started as a session leader).
    Both are needed: Ray's processes rewrite their title over their environment, and a
    daemon may start its own session."""
    needle = f"{RUN_MARK_ENV}={mark}".encode() + b"\0"
    found: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[-1].split()
            if fields[0] == b"Z":
                continue  # a zombie holds no resources; its parent will reap it
            if sid is None or int(fields[3]) != sid:
                with open(f"/proc/{entry}/environ", "rb") as f:
                    if needle not in f.read() + b"\0":
                        continue
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except (FileNotFoundError, ProcessLookupError, PermissionError, IndexError):
            continue
        found[int(entry)] = " ".join(cmd.split())
    return found


def reap_leftovers(
    mark: str, label: str, sid: int | None = None, grace: float = 15.0
) -> list[dict[str, Any]]:
    """Wait ``grace`` seconds for a half's processes to exit; report and end the rest."""
    deadline = time.monotonic() + grace
    left = marked_processes(mark, sid)
    while left and time.monotonic() < deadline:
        time.sleep(0.5)
        left = marked_processes(mark, sid)
    if not left:
        print(f"[{label}] no processes left behind", flush=True)
        return []
    print(
        f"[{label}] LEFTOVER: {len(left)} process(es) still alive {grace:g} s after the "
        f"run; ending them:",
        flush=True,
    )
    for pid, cmd in sorted(left.items()):
        print(f"    pid {pid}: {cmd[:160]}", flush=True)
    for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 2.0)):
        for pid in marked_processes(mark, sid):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        end = time.monotonic() + wait
        while marked_processes(mark, sid) and time.monotonic() < end:
            time.sleep(0.2)
    still = marked_processes(mark, sid)
    if still:
        print(f"[{label}] could not end: {sorted(still)}", flush=True)
    return [{"pid": pid, "cmd": cmd} for pid, cmd in sorted(left.items())]


def cpu_busy(interval: float = 1.0) -> float:
    """Fraction of the machine's CPU time spent busy over ``interval`` seconds."""

    def sample() -> tuple[int, int]:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
        return sum(fields), idle

    total0, idle0 = sample()
    time.sleep(interval)
    total1, idle1 = sample()
    return 1.0 - (idle1 - idle0) / max(1, total1 - total0)


def warn_if_busy(label: str) -> float:
    """Numbers taken on a busy machine are not comparable: say so before a half runs."""
    busy = cpu_busy()
    if busy > 0.15:
        print(
            f"[{label}] WARNING: the machine is {busy:.0%} busy before the run "
            f"(other processes); these numbers will be low.",
            flush=True,
        )
    return busy


# --------------------------------------------------------------------------------------
# Running one half
# --------------------------------------------------------------------------------------


def run_half(
    label: str, cmd: list[str], json_path: Path, timeout: float
) -> tuple[dict[str, Any] | None, list[dict[str, Any]], str | None]:
    """Run one half; return (its JSON, leftover processes, error)."""
    mark = uuid.uuid4().hex
    env = dict(os.environ)
    env[RUN_MARK_ENV] = mark
    env["RAY_USAGE_STATS_ENABLED"] = "0"  # no usage reports leave the machine
    env.pop("RAY_ADDRESS", None)  # always a fresh local node
    log_path = json_path.with_suffix(".stderr.log")
    busy = warn_if_busy(label)
    print(f"\n=== {label}: {' '.join(cmd[:2])} ... (stderr: {log_path})", flush=True)
    error = None
    started = time.monotonic()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            cmd, cwd=RESULTS, env=env, stdout=None, stderr=log, start_new_session=True
        )
        try:
            rc = proc.wait(timeout=timeout)
            if rc not in (0, 1):  # 1: some rows FAILED, the JSON still holds the rest
                error = f"exited with {rc}"
        except subprocess.TimeoutExpired:
            error = f"no result within {timeout:g} s"
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # the group this script started
            except ProcessLookupError:
                pass
            proc.wait()
        except KeyboardInterrupt:
            try:
                os.killpg(proc.pid, signal.SIGINT)
                proc.wait(timeout=20)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
            reap_leftovers(mark, label, proc.pid, grace=5.0)
            raise
    print(f"=== {label}: finished in {time.monotonic() - started:.0f} s", flush=True)
    leftovers = reap_leftovers(mark, label, proc.pid)
    doc = None
    if json_path.exists():
        with open(json_path) as f:
            doc = json.load(f)
        doc["machine_busy_before"] = busy
    elif error is None:
        error = "wrote no results"
    if error:
        tail = log_path.read_text(errors="replace").strip().splitlines()[-15:]
        print(f"[{label}] {error}; last lines of {log_path}:", flush=True)
        for line in tail:
            print(f"    {line}", flush=True)
    return doc, leftovers, error


def microbenchmark_args(
    args: argparse.Namespace, runtime: str, json_path: Path, filter: str | None
) -> list[str]:
    out = ["--runtime", runtime, "--json", str(json_path)]
    if filter:
        out += ["--filter", filter]
    if args.quick:
        out.append("--quick")
    if args.extra:
        out.append("--extra")
    for name in ("duration", "trials", "warmup", "settle", "row_timeout"):
        value = getattr(args, name)
        if value is not None:
            out += [f"--{name.replace('_', '-')}", str(value)]
    return out


def load_ray_results(path: str) -> dict[str, Any]:
    with open(path) as f:
        doc = json.load(f)
    if "results" in doc:
        return doc
    if isinstance(doc.get("ray"), dict):
        return doc["ray"]
    raise SetupError(f"{path} holds no Ray results")


# --------------------------------------------------------------------------------------
# The table
# --------------------------------------------------------------------------------------


def _by_name(doc: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in (doc or {}).get("results", [])}


def _cell(r: dict[str, Any] | None) -> str:
    if r is None:
        return "-"
    if r.get("error"):
        return "FAILED"
    if r["unit"] == "seconds":
        return f"{r['value']:.2f} s (mean {r['extra']['mean']:.2f})"
    if r["unit"] == "MB":
        return f"{r['value']:.0f} MB / {r['extra']['processes']} procs"
    return f"{r['value']:.2f}"


def judge(name: str, ember_value: float | None, ratio: float | None) -> tuple[str, bool | None]:
    """A row's target, and whether it was met (None: no figure to judge)."""
    if name == STARTUP_ROW:
        met = None if ember_value is None else ember_value < STARTUP_TARGET_S
        return f"< {STARTUP_TARGET_S:g} s", met
    need = MEMORY_TARGET if name == MEMORY_ROW else FAST_PATH_ROWS.get(name, DEFAULT_TARGET)
    target = f"<= 1/{need:g} Ray" if name == MEMORY_ROW else f">= {need:g}x"
    return target, None if ratio is None else ratio >= need


def compare_rows(ray: dict[str, Any] | None, ember: dict[str, Any] | None) -> list[dict[str, Any]]:
    rays, embers = _by_name(ray), _by_name(ember)
    names = list(rays) + [n for n in embers if n not in rays]
    rows = []
    for name in names:
        r, e = rays.get(name), embers.get(name)
        unit = (r or e or {}).get("unit", "per second")
        rv = r["value"] if r and not r.get("error") else None
        ev = e["value"] if e and not e.get("error") else None
        ratio = None
        if rv is not None and ev is not None and rv > 0 and ev > 0:
            # >1 always means Ember is better.
            ratio = ev / rv if unit == "per second" else rv / ev
        target, passed = judge(name, ev, ratio)
        if e is not None and e.get("error"):
            passed = False
        rows.append(
            {
                "workload": name,
                "unit": unit,
                "ray": rv,
                "ray_std": r.get("std") if r else None,
                "ray_error": r.get("error") if r else None,
                "ember": ev,
                "ember_std": e.get("std") if e else None,
                "ember_error": e.get("error") if e else None,
                "ray_cell": _cell(r),
                "ember_cell": _cell(e),
                "ratio": ratio,
                "ratio_kind": "Ember/Ray" if unit == "per second" else "Ray/Ember",
                "target": target,
                "passed": passed,
            }
        )
    return rows


def print_table(rows: list[dict[str, Any]]) -> None:
    paired = any(len(row.get("round_ratios") or ()) > 1 for row in rows)
    header: tuple[str, ...] = ("workload", "unit", "Ray", "Ember", "ratio", "target", "")
    if paired:  # the Ray and Ember cells are each side's median round
        header = (*header[:4], "median ratio", "paired ratios", *header[5:])
    lines = []
    for row in rows:
        ratio = "-" if row["ratio"] is None else f"{row['ratio']:.2f}x"
        if row["ratio"] is not None and row["ratio_kind"] == "Ray/Ember":
            ratio += " (Ray/Ember)"
        status = {True: "ok", False: "MISSED", None: ""}[row["passed"]]
        cells: tuple[str, ...] = (
            row["workload"],
            row["unit"],
            row["ray_cell"],
            row["ember_cell"],
            ratio,
        )
        if paired:
            cells += (" ".join(f"{r:.2f}" for r in row.get("round_ratios") or ()) or "-",)
        lines.append((*cells, row["target"], status))
    widths = [max(len(str(x[i])) for x in [header, *lines]) for i in range(len(header))]
    fmt = "  ".join(f"{{:{'<' if i < 2 else '>'}{w}}}" for i, w in enumerate(widths))
    print()
    print(fmt.format(*header))
    print("  ".join("-" * w for w in widths))
    for line in lines:
        print(fmt.format(*line))
    print("ratio: >1 means Ember is better (Ember/Ray for rates, Ray/Ember for time and memory).")


# --------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--filter", help="only rows whose name contains SUBSTRING")
    p.add_argument("--quick", action="store_true", help="short trials: a smoke run")
    p.add_argument("--only", choices=("ray", "ember"), help="run one half only")
    p.add_argument(
        "--json",
        metavar="FILE",
        help="write the whole table (and both halves' raw results) to FILE",
    )
    p.add_argument(
        "--ray-results",
        metavar="FILE",
        help="take Ray's half from an earlier run's JSON instead of running it",
    )
    p.add_argument(
        "--extra",
        action="store_true",
        help="also the rows of `ray microbenchmark` outside the comparison set",
    )
    p.add_argument(
        "--ember-python",
        type=Path,
        default=default_ember_python(),
        help="the Python of Ember's environment (default: .venv/bin/python)",
    )
    p.add_argument(
        "--timeout", type=float, default=3600.0, help="seconds one half may take (default 3600)"
    )
    p.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    for name, help_ in (
        ("duration", "seconds per trial (Ray: 2)"),
        ("warmup", "warm-up seconds per row (Ray: 1)"),
        ("settle", "sleep before each row (Ray: 10)"),
        ("row-timeout", "fail a row after this many seconds"),
    ):
        p.add_argument(f"--{name}", type=float, help=help_)
    p.add_argument("--trials", type=int, help="trials per row (Ray: 4)")
    p.add_argument(
        "--interleave",
        action="store_true",
        help="run row by row, Ray's then Ember's (alternating), instead of half after half",
    )
    p.add_argument(
        "--rounds", type=int, default=1, help="with --interleave: paired runs of each row"
    )
    args = p.parse_args(argv)
    if args.rounds < 1:
        p.error("--rounds must be at least 1")
    if args.rounds > 1 and not args.interleave:
        p.error("--rounds needs --interleave (rounds of whole halves are not paired)")
    if args.interleave and (args.only or args.ray_results):
        p.error("--interleave runs both halves itself: drop --only and --ray-results")
    return args


def half_command(args: argparse.Namespace, side: str, path: Path, filter: str | None) -> list[str]:
    """The command that runs one half (``side``: "ray" or "ember") of the rows ``filter`` picks."""
    bench = microbenchmark_args(args, side, path, filter)
    if side == "ray":
        return [str(ensure_ray_venv()), "-c", LAUNCHER, str(MODULE), *bench]
    return [str(args.ember_python), "-m", "ember.tools.microbenchmark", *bench]


def row_names(args: argparse.Namespace) -> list[str]:
    """The rows this run measures, in Ray's order, as the microbenchmark lists them."""
    cmd = [str(args.ember_python), "-m", "ember.tools.microbenchmark", "--list"]
    cmd += (["--filter", args.filter] if args.filter else []) + (["--extra"] if args.extra else [])
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    names = [line.strip() for line in out.stdout.splitlines() if line.strip()]
    if out.returncode != 0 or not names:
        raise SetupError(f"no rows to run ({' '.join(cmd)}): {out.stderr.strip()[-300:]}")
    return names


def _median_result(results: list[dict[str, Any]]) -> dict[str, Any] | None:
    """One side's result for a row over the rounds: the round with the median value; a
    round that failed makes the row failed (its error kept)."""
    if not results:
        return None
    failed = [r for r in results if r.get("error")]
    if failed:
        return failed[0]
    ordered = sorted(results, key=lambda r: r["value"])
    return ordered[(len(ordered) - 1) // 2]


def run_interleaved(
    args: argparse.Namespace, stamp: str
) -> tuple[list[dict[str, Any]], dict[str, list[dict[str, Any]]], dict[str, str]]:
    """Each row on both runtimes, one after the other, ``args.rounds`` times; a row's ratio
    is the median of its paired ratios."""
    names = row_names(args)
    got: dict[str, dict[str, list[dict[str, Any]]]] = {
        side: {n: [] for n in names} for side in ("ray", "ember")
    }
    leftovers: dict[str, list[dict[str, Any]]] = {"ray": [], "ember": []}
    errors: dict[str, str] = {}
    for round_ in range(args.rounds):
        for i, name in enumerate(names):
            order = ("ray", "ember") if (round_ + i) % 2 == 0 else ("ember", "ray")
            for side in order:
                path = RESULTS / f"{side}-{stamp}-r{round_}-{i}.json"
                cmd = half_command(args, side, path, name)
                doc, left, err = run_half(
                    f"{side} {name!r} round {round_ + 1}", cmd, path, args.timeout
                )
                leftovers[side] += left
                result = _by_name(doc).get(name)
                if err or result is None:
                    errors[f"{side} {name}"] = err or "no result"
                    result = {"name": name, "unit": "", "value": None, "error": err or "no result"}
                got[side][name].append(result)
    docs = {
        side: {"results": [r for n in names if (r := _median_result(got[side][n]))]} for side in got
    }
    rows = compare_rows(docs["ray"], docs["ember"])
    for row in rows:
        pairs = zip(got["ray"][row["workload"]], got["ember"][row["workload"]], strict=True)
        ratios = sorted(
            (e["value"] / r["value"] if row["unit"] == "per second" else r["value"] / e["value"])
            for r, e in pairs
            if not r.get("error") and not e.get("error") and r["value"] and e["value"]
        )
        row["round_ratios"] = ratios
        if ratios and not row["ember_error"]:
            row["ratio"] = ratios[(len(ratios) - 1) // 2]
            row["target"], row["passed"] = judge(row["workload"], row["ember"], row["ratio"])
    return rows, leftovers, errors


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    RESULTS.mkdir(exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    run_ray = args.only in (None, "ray") and not args.ray_results
    run_ember = args.only in (None, "ember")
    halves: dict[str, dict[str, Any] | None] = {"ray": None, "ember": None}
    leftovers: dict[str, list[dict[str, Any]]] = {}
    errors: dict[str, str] = {}
    try:
        if run_ember:  # before Ray's half, so a missing runtime fails in seconds
            check_ember(args.ember_python)
        if args.interleave:
            rows, leftovers, errors = run_interleaved(args, stamp)
        else:
            if args.ray_results:
                halves["ray"] = load_ray_results(args.ray_results)
            for side, wanted in (("ray", run_ray), ("ember", run_ember)):
                if not wanted:
                    continue
                path = RESULTS / f"{side}-{stamp}.json"
                cmd = half_command(args, side, path, args.filter)
                halves[side], leftovers[side], err = run_half(side, cmd, path, args.timeout)
                if err:
                    errors[side] = err
            rows = compare_rows(halves["ray"], halves["ember"])
    except SetupError as exc:
        print(f"compare_ray: {exc}", file=sys.stderr)
        return 2
    print_table(rows)
    for label, procs in leftovers.items():
        if procs:
            print(
                f"WARNING: the {label} half left {len(procs)} process(es) behind "
                f"(ended by this script)."
            )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "rows": rows,
                    "ray": halves["ray"],
                    "ember": halves["ember"],
                    "leftovers": leftovers,
                    "errors": errors,
                },
                f,
                indent=2,
            )
    failed_rows = [
        r["workload"]
        for r in rows
        if (run_ray and r["ray_error"]) or (run_ember and r["ember_error"])
    ]
    if errors or failed_rows or any(leftovers.values()):
        return 1
    if args.strict and any(r["passed"] is False for r in rows):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
