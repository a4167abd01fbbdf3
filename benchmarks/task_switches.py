"""Short tasks with one of the owner's switches off and on, alternating on one machine: a
pattern of no-op tasks for ``--seconds``, in a fresh Ember each run.

    .venv/bin/python benchmarks/task_switches.py [--switch pipelining|direct]
        [--pattern async|sync] [--pairs 3] [--seconds 6]

Switches: ``pipelining`` (``EMBER_MAX_TASKS_IN_FLIGHT_PER_WORKER`` 1 or 2: a short task pushed
behind a running one) and ``direct`` (``EMBER_DIRECT_TASK_SUBMIT`` 0 or 1: a task pushed to
an idle leased worker by the caller's own thread). Patterns: ``async`` (1,000 tasks, then
one ``get``: the microbenchmark's tasks async row) and ``sync`` (``get(f.remote())`` one at
a time: its tasks sync row).

Each run prints tasks/s, how many tasks the owner pushed behind a running one, how many came
back unstarted and how many the caller's thread pushed itself, and the CPU per task of the
driver, the dashboard and the workers (from /proc, exact). Runs alternate, and the order
within a pair flips every pair, so that a VM whose speed drifts over minutes shows in both.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

SWITCHES = {  # the setting and its (off, on) values
    "pipelining": ("EMBER_MAX_TASKS_IN_FLIGHT_PER_WORKER", ("1", "2")),
    "direct": ("EMBER_DIRECT_TASK_SUBMIT", ("0", "1")),
}


def one_run(seconds: float, pattern: str) -> dict:
    """In this process: a fresh Ember, the pattern for ``seconds``, what it measured."""
    import ember
    import psutil
    from ember import global_state

    ember.init(num_cpus=2)

    @ember.remote
    def small_value() -> bytes:
        return b"ok"

    ember.get([small_value.remote() for _ in range(2000)])  # workers up, leases held
    me = psutil.Process()

    def cpu() -> dict[int, tuple[str, float]]:
        out = {}
        for p in [me, *me.children(recursive=True)]:
            try:
                times = p.cpu_times()
                out[p.pid] = (" ".join(p.cmdline()), times.user + times.system)
            except psutil.Error:
                pass
        return out

    submitter = global_state.worker.task_submitter
    before, stats0 = cpu(), submitter.stats()
    started, n = time.monotonic(), 0
    while time.monotonic() - started < seconds:
        if pattern == "async":
            ember.get([small_value.remote() for _ in range(1000)])
            n += 1000
        else:
            for _ in range(200):
                ember.get(small_value.remote())
            n += 200
    elapsed = time.monotonic() - started
    after, stats1 = cpu(), submitter.stats()
    per_task: dict[str, float] = {"driver": 0.0, "dashboard": 0.0, "workers": 0.0}
    for pid, (cmd, total) in after.items():
        if pid not in before:
            continue
        us = (total - before[pid][1]) / n * 1e6
        role = (
            "driver"
            if pid == me.pid
            else "dashboard"
            if "dashboard" in cmd
            else "workers"
            if "zygote" in cmd
            else None
        )
        if role:
            per_task[role] += us
    ember.shutdown()
    return {
        "tasks_per_s": n / elapsed,
        "pipelined": stats1["pipelined"] - stats0["pipelined"],
        "given_back": stats1["given_back"] - stats0["given_back"],
        "direct": stats1["direct"] - stats0["direct"],
        "tasks": n,
        "cpu_us_per_task": per_task,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--switch", choices=sorted(SWITCHES), default="pipelining")
    parser.add_argument("--pattern", choices=("async", "sync"), default="async")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one_run(args.seconds, args.pattern)))
        return 0
    setting, values = SWITCHES[args.switch]
    print(
        f"machine: {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}, {time.ctime()}; "
        f"{args.switch} ({setting}), {args.pattern} pattern"
    )
    for pair in range(args.pairs):
        order = values if pair % 2 == 0 else values[::-1]
        for value in order:
            one = [sys.executable, __file__, "--one", "--seconds", str(args.seconds)]
            out = subprocess.run(
                [*one, "--pattern", args.pattern],
                env={**os.environ, setting: value},
                capture_output=True,
                text=True,
                timeout=120 + args.seconds,
            )
            if out.returncode != 0:
                print(out.stderr[-2000:], file=sys.stderr)
                return 1
            r = json.loads(out.stdout.strip().splitlines()[-1])
            cpu = " ".join(f"{k} {v:.1f}" for k, v in r["cpu_us_per_task"].items())
            print(
                f"pair {pair + 1} {'on ' if value == values[1] else 'off'}: "
                f"{r['tasks_per_s']:7,.0f} tasks/s; of {r['tasks']:,}: pipelined "
                f"{r['pipelined']:,}, given back {r['given_back']:,}, pushed by the caller's "
                f"thread {r['direct']:,}; CPU us per task: {cpu}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
