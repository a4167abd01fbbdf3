"""``ember completion bash|zsh|fish``: the shell's completion script, click's own (the
script calls ``ember`` back with ``_EMBER_COMPLETE`` set, so commands, options and choices
such as ``ember list <TAB>``'s resources complete from the installed version)."""

from __future__ import annotations

import click
from click.shell_completion import get_completion_class

SHELLS = ("bash", "zsh", "fish")


@click.command("completion")
@click.argument("shell", type=click.Choice(SHELLS))
@click.pass_context
def completion(ctx: click.Context, shell: str) -> None:
    """Print the completion script for SHELL. Install it with:

    \b
      bash: eval "$(ember completion bash)"   (in ~/.bashrc)
      zsh:  eval "$(ember completion zsh)"    (in ~/.zshrc)
      fish: ember completion fish > ~/.config/fish/completions/ember.fish
    """
    root = ctx.find_root()
    maker = get_completion_class(shell)
    if maker is None:  # click ships all three; a missing one is a broken install
        raise click.ClickException(f"this click has no {shell} completion")
    script = maker(root.command, {}, "ember", "_EMBER_COMPLETE").source()
    click.echo(script)
