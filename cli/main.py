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
@click.pass_context
def microbenchmark(
    ctx: click.Context, filter_: str | None, quick: bool, json_path: str | None
) -> None:
    """Run the workloads of `ray microbenchmark` on a local node (more options, such as
    --extra, --trials and --settle: python -m ember.tools.microbenchmark --help)."""
    from ember.tools import microbenchmark as mb

    argv = list(ctx.args)  # the module's other options, passed through
    if filter_:
        argv += ["--filter", filter_]
    if quick:
        argv.append("--quick")
    if json_path:
        argv += ["--json", json_path]
    sys.exit(mb.main(argv) or 0)


@main.command()
@click.option("--num-cpus", type=float, default=None, help="CPUs for the local node.")
@click.option(
    "--tasks", type=click.IntRange(min=1), default=2000, help="How many tasks the demo runs."
)
@click.option(
    "--hold",
    type=click.FloatRange(min=0),
    default=None,
    help="Seconds to keep the node and dashboard up after the workload (default: until "
    "Ctrl-C when run from a terminal, 0 otherwise).",
)
def demo(num_cpus: float | None, tasks: int, hold: float | None) -> None:
    """Start a local node, run a demo workload of tasks and actors, and keep its dashboard up."""
    from ember.tools.demo import run_demo

    run_demo(num_cpus=num_cpus, num_tasks=tasks, hold_seconds=hold)


@main.command()
@click.option("--quick", is_flag=True, help="Each fault once (about 3 minutes).")
@click.option("--rounds", type=click.IntRange(min=1), default=None, help="Rounds of each fault.")
@click.option("--json", "json_path", default=None, help="Also write the results to this file.")
@click.option("--filter", "filter_", default=None, help="Only faults whose name contains this.")
def chaos(quick: bool, rounds: int | None, json_path: str | None, filter_: str | None) -> None:
    """Inject faults and hostile peers into a 2-node loopback cluster under load; print what
    survived and what leaked (exit status 1 if anything was not survived or leaked)."""
    from ember.tools.chaos.main import main as run_chaos

    argv = ["--quick"] if quick else []
    if rounds is not None:
        argv += ["--rounds", str(rounds)]
    if json_path:
        argv += ["--json", json_path]
    if filter_:
        argv += ["--filter", filter_]
    sys.exit(run_chaos(argv))


def _register() -> None:
    from ember.cli.archive import archive
    from ember.cli.dashboard_url import dashboard
    from ember.cli.get_state import get_state
    from ember.cli.job import job
    from ember.cli.kill_actor import kill_actor
    from ember.cli.list_state import list_state
    from ember.cli.logs import logs
    from ember.cli.memory import memory
    from ember.cli.metrics import metrics
    from ember.cli.stack import stack
    from ember.cli.summary import summary
    from ember.cli.timeline import timeline

    main.add_command(memory)
    main.add_command(metrics)
    main.add_command(stack)
    main.add_command(timeline)
    main.add_command(logs)
    main.add_command(list_state)
    main.add_command(get_state)
    main.add_command(summary)
    main.add_command(kill_actor)
    main.add_command(dashboard)
    main.add_command(archive)
    main.add_command(job)
    from ember.cli.start import start
    from ember.cli.status import status
    from ember.cli.stop import stop

    main.add_command(start)
    main.add_command(status)
    main.add_command(stop)


_register()

if __name__ == "__main__":
    main()
