"""The ``ember`` command. Each subcommand is a thin client of the runtime's public API."""

from __future__ import annotations

import sys

import click
from ember.cli.errors import EmberGroup, exit_codes_help


@click.group(
    cls=EmberGroup,
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog=exit_codes_help(),
)
@click.version_option(package_name="ember", prog_name="ember")
def main() -> None:
    """Ember: an operations-first distributed runtime for Python.

    Set NO_COLOR to keep colour out of the output (there is none on a pipe either);
    `ember completion bash|zsh|fish` prints a shell completion script."""


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


# The subcommands in their own modules, imported only when named (`ember cleanup` does not pay
# for the dashboard client's imports); `ember --help` imports them all for their help lines.
LAZY_COMMANDS = {
    "memory": "ember.cli.memory:memory",
    "stack": "ember.cli.stack:stack",
    "timeline": "ember.cli.timeline:timeline",
    "logs": "ember.cli.logs:logs",
    "list": "ember.cli.list_state:list_state",
    "get": "ember.cli.get_state:get_state",
    "summary": "ember.cli.summary:summary",
    "kill-actor": "ember.cli.kill_actor:kill_actor",
    "dashboard": "ember.cli.dashboard_url:dashboard",
    "archive": "ember.cli.archive:archive",
    "job": "ember.cli.job:job",
    "serve": "ember.cli.serve:serve",
    "cleanup": "ember.cli.cleanup:cleanup",
    "completion": "ember.cli.completion:completion",
    "metrics": "ember.cli.metrics:metrics",
    "start": "ember.cli.start:start",
    "status": "ember.cli.status:status",
    "stop": "ember.cli.stop:stop",
    # Ray's cluster launcher, on a cluster.yaml (issue 34).
    "up": "ember.cli.cluster_launcher:up",
    "down": "ember.cli.cluster_launcher:down",
    "exec": "ember.cli.cluster_launcher:exec_",
    "submit": "ember.cli.cluster_launcher:submit",
    "attach": "ember.cli.cluster_launcher:attach",
    "rsync-up": "ember.cli.cluster_launcher:rsync_up",
    "rsync-down": "ember.cli.cluster_launcher:rsync_down",
    "get-head-ip": "ember.cli.cluster_launcher:get_head_ip",
    "get-worker-ips": "ember.cli.cluster_launcher:get_worker_ips",
    "monitor": "ember.cli.cluster_launcher:monitor",
    "tune": "ember.cli.tune:tune",
}


def _register() -> None:
    main.lazy_commands.update(LAZY_COMMANDS)


_register()

if __name__ == "__main__":
    main()
