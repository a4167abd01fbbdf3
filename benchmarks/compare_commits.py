"""``ember microbenchmark`` on two commits of Ember, side by side in one run: is any row slower?

    .venv/bin/python benchmarks/compare_commits.py --base 8ef60f1 [--rounds 2] [--filter S]

The base commit is checked out in a git worktree (``benchmarks/.commits/<sha>/``, kept for
the next run) with a virtual environment of its own; this checkout is the other side. The
halves alternate (base, this, base, this, ...) so a machine that gets busier or quieter
during the run moves both, and each row keeps its best round. A row counts as slower when
this checkout's best is below the base's by more than ``--noise`` (default 10%, about the
spread of the synchronous rows between runs on a 2-core virtual machine; see README.md).
Exit status 1 when a row is slower or a half failed.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from compare_ray import REPO, RESULTS, _by_name, run_half  # noqa: E402

COMMITS = HERE / ".commits"


def checkout(rev: str) -> tuple[str, Path]:
    """A worktree of ``rev`` with Ember installed in its own venv: (sha, its python)."""
    sha = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--verify", f"{rev}^{{commit}}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    tree = COMMITS / sha[:12]
    if not tree.exists():
        COMMITS.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["git", "-C", str(REPO), "worktree", "add", "--detach", str(tree), sha], check=True
        )
    py = tree / ".venv" / "bin" / "python"
    if not (tree / ".venv" / ".ember-installed").exists():
        subprocess.run([sys.executable, "-m", "venv", str(tree / ".venv")], check=True)
        # The benchmark's own dependency (numpy) beside Ember's; no test tools.
        subprocess.run(
            [str(py), "-m", "pip", "install", "-q", "-e", str(tree), "numpy"], check=True
        )
        (tree / ".venv" / ".ember-installed").touch()
    return sha, py


def half_command(py: Path, args: argparse.Namespace, json_path: Path) -> list[str]:
    # The CLI, not a module path: the module moved between commits, the command did not.
    cmd = [str(py), "-m", "ember.cli.main", "microbenchmark", "--json", str(json_path)]
    if args.filter:
        cmd += ["--filter", args.filter]
    if args.quick:
        cmd.append("--quick")
    return cmd


def best(docs: list[dict[str, Any] | None]) -> dict[str, dict[str, Any]]:
    """Per row, the best value over the rounds (higher per second, lower otherwise)."""
    out: dict[str, dict[str, Any]] = {}
    for doc in docs:
        for name, row in _by_name(doc).items():
            if row.get("error"):
                out.setdefault(name, row)
                continue
            kept = out.get(name)
            higher = row["unit"] == "per second"
            if (
                kept is None
                or kept.get("error")
                or (row["value"] > kept["value"] if higher else row["value"] < kept["value"])
            ):
                out[name] = row
    return out


def compare(
    base: dict[str, dict[str, Any]], new: dict[str, dict[str, Any]], noise: float
) -> list[tuple[str, str, str, float | None, bool]]:
    """(row, base cell, new cell, new/base with >1 better, slower beyond noise) per row."""
    rows = []
    for name in list(base) + [n for n in new if n not in base]:
        b, n = base.get(name), new.get(name)
        ratio = None
        if b and n and not b.get("error") and not n.get("error") and b["value"] and n["value"]:
            ratio = (
                n["value"] / b["value"] if n["unit"] == "per second" else b["value"] / n["value"]
            )
        failed = bool(n is None or n.get("error"))
        slower = failed or (ratio is not None and ratio < 1.0 - noise)
        rows.append((name, _cell(b), _cell(n), ratio, slower))
    return rows


def _cell(row: dict[str, Any] | None) -> str:
    if row is None:
        return "-"
    if row.get("error"):
        return "FAILED"
    return f"{row['value']:.4g}"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base", required=True, help="the commit to compare against")
    p.add_argument("--rounds", type=int, default=2, help="alternating runs of each half")
    p.add_argument("--filter", default=None, help="only rows whose name contains this")
    p.add_argument("--quick", action="store_true", help="short trials (a smoke test)")
    p.add_argument("--noise", type=float, default=0.10, help="slower than this is a regression")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds per half")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    sha, base_py = checkout(args.base)
    new_py = REPO / ".venv" / "bin" / "python"
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    halves: dict[str, list[dict[str, Any] | None]] = {"base": [], "new": []}
    errors = []
    for round_ in range(args.rounds):
        for label, py in (("base", base_py), ("new", new_py)):
            path = RESULTS / f"commits-{stamp}-{label}-{round_}.json"
            doc, _, err = run_half(
                f"{label} #{round_ + 1}", half_command(py, args, path), path, args.timeout
            )
            halves[label].append(doc)
            if err:
                errors.append(f"{label} round {round_ + 1}: {err}")
    rows = compare(best(halves["base"]), best(halves["new"]), args.noise)
    width = max((len(r[0]) for r in rows), default=10)
    print(f"\n{'workload':<{width}}  {'base ' + sha[:8]:>14}  {'this checkout':>14}  ratio")
    for name, b, n, ratio, slower in rows:
        mark = "  SLOWER" if slower else ""
        shown = f"{ratio:.2f}x" if ratio is not None else "-"
        print(f"{name:<{width}}  {b:>14}  {n:>14}  {shown}{mark}")
    for e in errors:
        print(f"error: {e}", file=sys.stderr)
    return 1 if errors or any(r[4] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
