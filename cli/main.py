"""The ``ember`` command. Each subcommand is a thin client of the runtime's public API."""

from __future__ import annotations

import sys

import click


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="ember", prog_name="ember")
def main() -> None:
    """Ember: an operations-first distributed runtime for Python."""


@main.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.option(
    "--filter", "filter_", default=None, help="Run only workloads whose name contains this."
)
@click.option("--quick", is_flag=True, help="Short trials (a smoke test, not a measurement).")
@click.option("--json", "json_path", default=None, help="Also write the results to this file.")
def microbenchmark(filter_: str | None, quick: bool, json_path: str | None) -> None:
    """Run the workloads of `ray microbenchmark` on a local node."""
    from ember import microbenchmark as mb

    argv = []
    if filter_:
        argv += ["--filter", filter_]
    if quick:
        argv.append("--quick")
    if json_path:
        argv += ["--json", json_path]
    sys.exit(mb.main(argv) or 0)


@main.command()
@click.option("--num-cpus", type=float, default=None, help="CPUs for the local node.")
@click.option("--tasks", type=int, default=2000, help="How many tasks the demo runs.")
def demo(num_cpus: float | None, tasks: int) -> None:
    """Start a local node and run a demo workload of tasks and actors."""
    from ember.demo import run_demo

    run_demo(num_cpus=num_cpus, num_tasks=tasks)


def _register() -> None:
    from ember.cli.dashboard_url import dashboard
    from ember.cli.kill_actor import kill_actor
    from ember.cli.list_state import list_state
    from ember.cli.logs import logs
    from ember.cli.memory import memory
    from ember.cli.stack import stack
    from ember.cli.summary import summary
    from ember.cli.timeline import timeline

    main.add_command(memory)
    main.add_command(stack)
    main.add_command(timeline)
    main.add_command(logs)
    main.add_command(list_state)
    main.add_command(summary)
    main.add_command(kill_actor)
    main.add_command(dashboard)


_register()

if __name__ == "__main__":
    main()
