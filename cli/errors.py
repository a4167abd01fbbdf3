"""One error style and one set of exit codes for every ``ember`` command.

Every failure a command reports reads ``ember: error: <what is wrong and what to do>`` on
stderr (a usage error is preceded by the command's usage line), and the exit status says
what kind of failure it was (``EXIT_CODES``, also printed by ``ember --help``).
"""

from __future__ import annotations

import errno
import importlib
import os
import sys
from typing import Any, NoReturn

import click

OK, FAILED, USAGE, INTERRUPTED = 0, 1, 2, 130
EXIT_CODES = (
    (OK, "success"),
    (FAILED, "the thing asked failed: not found, unreachable cluster, failed job, ..."),
    (USAGE, "usage error: an unknown option, a bad value, an ambiguous id prefix"),
    (INTERRUPTED, "interrupted (Ctrl-C)"),
)
PREFIX = "ember: error: "


def exit_codes_help() -> str:
    """The exit codes as ``ember --help`` lists them (click keeps ``\\b`` paragraphs as-is)."""
    lines = [f"  {code:<3} {meaning}" for code, meaning in EXIT_CODES]
    return "\b\nExit codes:\n" + "\n".join(lines)


def fail(message: str, code: int = FAILED) -> NoReturn:
    """Ends the command with ``ember: error: message`` on stderr and exit status ``code``."""
    click.echo(f"{error_prefix()}{message}", err=True)
    sys.exit(code)


def error_prefix() -> str:
    """``ember: error: ``, in red on a terminal that takes colour (``terminal.colour``)."""
    from ember.cli.terminal import colour

    return click.style(PREFIX, fg="red", bold=True) if colour(sys.stderr) else PREFIX


class NotUnique(click.ClickException):
    """An id prefix that matches several things: the user must say more (a usage error)."""

    exit_code = USAGE


def _show(e: click.ClickException) -> None:
    if isinstance(e, click.UsageError) and e.ctx is not None:
        click.echo(e.ctx.get_usage(), err=True)
        name = e.ctx.command_path
        click.echo(f"Try '{name} --help' for help.", err=True)
    click.echo(f"{error_prefix()}{e.format_message()}", err=True)


class EmberGroup(click.Group):
    """click's group, its errors in Ember's style: click runs the command without its own
    error handling (``standalone_mode=False``) and this reports what comes out. Commands
    in ``lazy_commands`` (name -> ``module:attribute``) are imported when first named."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy_commands: dict[str, str] = {}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *self.lazy_commands})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in self.commands and name in self.lazy_commands:
            module, _, attribute = self.lazy_commands[name].partition(":")
            self.add_command(getattr(importlib.import_module(module), attribute), name)
        return super().get_command(ctx, name)

    def main(  # type: ignore[override]
        self,
        args: Any = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, **extra)
        try:
            code = super().main(args, prog_name, complete_var, False, **extra)
        except click.ClickException as e:
            _show(e)
            sys.exit(e.exit_code)
        except click.Abort:
            click.echo("ember: interrupted", err=True)
            sys.exit(INTERRUPTED)
        except OSError as e:
            if e.errno != errno.EPIPE:
                raise
            # `ember list tasks | head`: the reader left. Nothing more can be said to it, and
            # Python's final flush of stdout must not complain either.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(OK)
        # A command returns None; click returns the code of an explicit ctx.exit(code).
        sys.exit(code if isinstance(code, int) else OK)
