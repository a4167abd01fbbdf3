"""``ember completion``: the bash script, loaded into a real ``bash`` as a user's ``~/.bashrc``
loads it, completes ``ember li<TAB>``, a command's choices and its options (the script calls
the installed ``ember`` back with ``_EMBER_COMPLETE=bash_complete``)."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
from ember_test_utils import ember_cli

pytestmark = pytest.mark.timeout(60)


def complete_in_bash(*words: str) -> list[str]:
    """What bash offers for the last of ``words`` after ``eval "$(ember completion bash)"``."""
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("no bash on this machine")
    quoted = " ".join(f"'{w}'" for w in words)
    script = (
        'eval "$(ember completion bash)"\n'
        f"COMP_WORDS=({quoted}); COMP_CWORD={len(words) - 1}\n"
        # As bash calls it for a command line: the command's name is the first argument.
        "_ember_completion ember\n"
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    env = {**os.environ, "PATH": f"{os.path.dirname(ember_cli())}:{os.environ['PATH']}"}
    done = subprocess.run(
        [bash, "--norc", "--noprofile", "-c", script],
        capture_output=True,
        text=True,
        timeout=30,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_bash_completes_commands_choices_and_options():
    assert complete_in_bash("ember", "li") == ["list"]
    assert complete_in_bash("ember", "c") == ["chaos", "cleanup", "completion"]
    assert complete_in_bash("ember", "list", "pl") == ["placement-groups"]
    assert complete_in_bash("ember", "cleanup", "--d") == ["--dry-run"]
    assert complete_in_bash("ember", "job", "s") == ["status", "stop", "submit"]
    assert complete_in_bash("ember", "completion", "") == ["bash", "zsh", "fish"]


def test_zsh_and_fish_scripts_are_for_ember():
    for shell, marker in (("zsh", "#compdef ember"), ("fish", "--command ember")):
        done = subprocess.run(
            [ember_cli(), "completion", shell], capture_output=True, text=True, timeout=30
        )
        assert done.returncode == 0, done.stderr
        assert marker in done.stdout and "_EMBER_COMPLETE=" in done.stdout, done.stdout
    bad = subprocess.run(
        [ember_cli(), "completion", "tcsh"], capture_output=True, text=True, timeout=30
    )
    assert bad.returncode == 2
    assert bad.stderr.splitlines()[-1] == (
        "ember: error: Invalid value for '{bash|zsh|fish}': 'tcsh' is not one of 'bash', "
        "'zsh', 'fish'."
    )
