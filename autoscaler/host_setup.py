"""What a host gets before Ember starts on it, in Ray's updater's order: ``file_mounts``
copied (``rsync``), then ``initialization_commands``, then the node kind's setup commands
(``setup_commands`` already merged into ``head_setup_commands`` and ``worker_setup_commands``
by the config's defaults). ``ember up`` does it for the head from the user's machine; the
head's autoscaler does it for each worker host it starts a node on, copying the file mounts
from the head's own copies (``worker_setup`` below).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ember.autoscaler.command_runner import CommandError, CommandRunner

CONNECT_TIMEOUT_S = 60.0  # the first SSH command: a host that is still booting
SETUP_TIMEOUT_S = 1800.0  # one setup command (a pip install may take long; never forever)
COPY_TIMEOUT_S = 600.0  # one file mount
SHORT_TIMEOUT_S = 60.0  # mkdir, cat, rm


class RemoteError(RuntimeError):
    """What failed on a host; the launcher and the provider show it as their own error."""


def run_on(runner: CommandRunner, cmd: Sequence[str] | str, timeout: float, **kw: Any) -> str:
    """The command's standard output; a failure is a RemoteError naming it."""
    try:
        return runner.run(cmd, timeout=timeout, **kw).stdout
    except CommandError as e:
        raise RemoteError(str(e)) from None


def home_of(runner: CommandRunner) -> str:
    return run_on(runner, 'printf %s "$HOME"', CONNECT_TIMEOUT_S, what="reaching the host").strip()


def expand_home(path: str, home: str) -> str:
    """A remote path with Ray's ``~/`` made absolute (rsync and quoted words never expand)."""
    return home + path[1:] if path == "~" or path.startswith("~/") else path


def sync_file_mounts(
    config: Mapping[str, Any], runner: CommandRunner, home: str, echo: Callable[[str], None]
) -> None:
    """``file_mounts`` (remote path: local path), each copied to the host (a directory's
    contents into the remote directory, as Ray's rsync does)."""
    for remote, local in (config.get("file_mounts") or {}).items():
        local = os.path.expanduser(local)
        if not os.path.exists(local):
            raise RemoteError(f"file_mounts: {local} (for {remote}) does not exist")
        target = expand_home(remote, home)
        parent = target.rstrip("/") if os.path.isdir(local) else os.path.dirname(target)
        run_on(runner, ["mkdir", "-p", "--", parent or "/"], SHORT_TIMEOUT_S)
        source = local.rstrip("/") + "/" if os.path.isdir(local) else local
        echo(f"  file_mounts: {local} -> {runner.host}:{target}")
        try:
            runner.put(
                source,
                target.rstrip("/") + ("/" if os.path.isdir(local) else ""),
                timeout=COPY_TIMEOUT_S,
            )
        except CommandError as e:
            raise RemoteError(str(e)) from None


def run_commands(
    runner: CommandRunner, field: str, commands: Sequence[str], echo: Callable[[str], None]
) -> None:
    for i, cmd in enumerate(commands):
        echo(f"  {field}[{i}]: {cmd}")
        run_on(runner, cmd, SETUP_TIMEOUT_S, what=f"{field}[{i}] ({cmd[:80]})")


def worker_setup(config: Mapping[str, Any]) -> dict[str, Any]:
    """What the head's autoscaler runs on a worker host before its node starts: the
    config's file mounts (copied from the head: in the config ``ember up`` leaves there,
    each source is the head's own copy, as in Ray's bootstrap config), its initialization
    commands and its worker setup commands."""
    return {
        "file_mounts": dict(config.get("file_mounts") or {}),
        "initialization_commands": list(config.get("initialization_commands") or ()),
        "worker_setup_commands": list(config.get("worker_setup_commands") or ()),
    }


def set_up_worker_host(
    runner: CommandRunner, setup: Mapping[str, Any], echo: Callable[[str], None]
) -> None:
    """``worker_setup``'s steps on one host; a step that fails is a RemoteError naming it,
    and nothing after it runs."""
    steps = ("file_mounts", "initialization_commands", "worker_setup_commands")
    if not any(setup.get(k) for k in steps):
        return  # nothing to do: not even an SSH round trip for the home directory
    sync_file_mounts(setup, runner, home_of(runner), echo)
    run_commands(runner, "initialization_commands", setup["initialization_commands"], echo)
    run_commands(runner, "worker_setup_commands", setup["worker_setup_commands"], echo)
