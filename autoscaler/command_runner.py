"""Running commands on a cluster's hosts: what the launcher (``ember up``/``exec``/``rsync-up``/
``dashboard``) and the ``local`` node provider do on a machine, behind one small interface.

``LocalCommandRunner`` runs on this machine (``fake_multinode``: every node is local).
``SSHCommandRunner`` drives the real ``ssh`` and ``rsync`` binaries, always with argument lists
(never a local shell). The remote side of ssh is a shell whatever we do, so a command given as
an argument list is quoted word by word (``shlex.join``); a command given as a string is a
shell line from the user's own cluster.yaml (``setup_commands``) and runs as written.

Secrets (the cluster token) never go on a command line, which every user of either machine
can read in ``ps``: ``secret_env`` travels on the command's standard input and is exported by
the remote shell before the command runs. Every call has a deadline; ssh's own
``ConnectTimeout`` and keep-alives make a host that is down or gone fail fast, not hang.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import socket
import subprocess
import tempfile
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import IO

CONNECT_TIMEOUT_S = 10  # ssh -o ConnectTimeout: a host that does not answer
KEEPALIVE_S = 5  # ssh -o ServerAliveInterval (x3): a connection that went dead mid-command
OUTPUT_TAIL = 64 * 1024  # bytes of each stream kept: a chatty setup command cannot fill memory
SSH_FAILED = 255  # ssh's own exit status: it could not connect or authenticate

# Providers whose head ``ember up`` starts on this machine: their runner is a local one.
LOCAL_HEAD_PROVIDERS = ("fake_multinode", "slurm")

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Host names, IPv4/IPv6 addresses, user names: never an option (a leading '-') or a shell word.
_HOST = re.compile(r"^[A-Za-z0-9_.:\[\]%][A-Za-z0-9_.:\[\]%-]*$")
_USER = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")


class CommandError(RuntimeError):
    """A command that failed, could not start, or ran out of time; the message names the host
    and what was run, and ends with the tail of its error output."""

    def __init__(
        self, host: str, what: str, reason: str, returncode: int | None = None, unreachable=False
    ) -> None:
        self.host = host
        self.returncode = returncode
        self.unreachable = unreachable  # ssh could not reach or log in: the host, not the command
        super().__init__(f"{host}: {what}: {reason}")


@dataclass(frozen=True)
class CommandResult:
    returncode: int
    stdout: str  # the last OUTPUT_TAIL bytes, decoded
    stderr: str


def _check_env(env: Mapping[str, str] | None) -> dict[str, str]:
    out = {}
    for name, value in (env or {}).items():
        if not _ENV_NAME.match(name):
            raise ValueError(f"environment variable name {name!r} is not a valid shell name")
        if "\n" in str(value) or "\0" in str(value):
            raise ValueError(f"environment variable {name} must be one line")
        out[name] = str(value)
    return out


def _tail(f: IO[bytes]) -> str:
    f.seek(0, os.SEEK_END)
    size = f.tell()
    f.seek(max(0, size - OUTPUT_TAIL))
    return f.read().decode(errors="replace")


def run_bounded(
    argv: Sequence[str],
    timeout: float,
    stdin: bytes | None = None,
    env: Mapping[str, str] | None = None,
) -> CommandResult:
    """``argv`` run to its end or ``timeout`` (then killed: subprocess.TimeoutExpired), its
    output kept to the last OUTPUT_TAIL bytes of each stream (spooled through files)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            env=dict(env) if env is not None else None,
        )
        try:
            proc.communicate(stdin, timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise
        return CommandResult(proc.returncode, _tail(out), _tail(err))


class PortForward:
    """A local port relaying to a port on the host, until ``close()`` (or the ``with`` ends)."""

    def __init__(self, local_port: int, process: subprocess.Popen | None = None) -> None:
        self.local_port = local_port
        self._process = process

    def alive(self) -> bool:
        """Whether the relay still runs (a local port needs none: always)."""
        return self._process is None or self._process.poll() is None

    def close(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()

    def __enter__(self) -> PortForward:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class CommandRunner(ABC):
    """One host. ``cmd`` is an argument list (quoted for the remote shell) or a shell line."""

    host: str
    # Exit status 255 is ssh's own failure (cannot connect or log in) only for ssh runners.
    reaches_by_ssh = False

    @abstractmethod
    def run(
        self,
        cmd: Sequence[str] | str,
        *,
        timeout: float,
        env: Mapping[str, str] | None = None,
        secret_env: Mapping[str, str] | None = None,
        check: bool = True,
        what: str | None = None,
    ) -> CommandResult:
        """Runs ``cmd`` to its end within ``timeout`` seconds (else CommandError). ``env`` may
        appear on a command line; ``secret_env`` never does. ``check``: a non-zero exit
        raises CommandError with the command's error output. ``what`` names the command in
        errors (default: the command itself, cut to 200 characters)."""

    @abstractmethod
    def put(self, local_path: str, remote_path: str, *, timeout: float) -> None:
        """Copies a file or a directory's contents (``local/`` → ``remote/``) to the host."""

    @abstractmethod
    def get(self, remote_path: str, local_path: str, *, timeout: float) -> None:
        """Copies a file or directory from the host to this machine."""

    @abstractmethod
    def port_forward(
        self,
        remote_port: int,
        local_port: int = 0,
        *,
        timeout: float = 30.0,
        remote_host: str = "127.0.0.1",
    ) -> PortForward:
        """This machine's 127.0.0.1:``local_port`` (0: a free one) relayed to
        ``remote_host``:``remote_port`` as the host sees it (its loopback by default; the
        host's own IP for a server bound only there, like the GCS); returns once the local
        port accepts connections."""

    @abstractmethod
    def run_attached(
        self, cmd: Sequence[str] | str, *, env: Mapping[str, str] | None = None, tty: bool = False
    ) -> int:
        """Runs ``cmd`` with this terminal's standard streams (``ember exec``/``attach``/
        ``submit``: the user watches and may interrupt it); its exit status. No deadline:
        the user ends it. No ``secret_env``: standard input is the user's."""

    def _fail(self, what: str, result: CommandResult) -> CommandError:
        why = (result.stderr or result.stdout).strip()[-2000:] or "no output"
        unreachable = self.reaches_by_ssh and result.returncode == SSH_FAILED
        if unreachable:
            why = f"ssh could not reach or log in to the host: {why}"
        return CommandError(
            self.host, what, f"exit {result.returncode}: {why}", result.returncode, unreachable
        )


def _describe(cmd: Sequence[str] | str) -> str:
    text = cmd if isinstance(cmd, str) else shlex.join(cmd)
    return text if len(text) <= 200 else text[:197] + "..."


class LocalCommandRunner(CommandRunner):
    """This machine, for providers whose nodes are local processes."""

    def __init__(self) -> None:
        self.host = "localhost"

    def run(
        self,
        cmd: Sequence[str] | str,
        *,
        timeout: float,
        env: Mapping[str, str] | None = None,
        secret_env: Mapping[str, str] | None = None,
        check: bool = True,
        what: str | None = None,
    ) -> CommandResult:
        argv = ["/bin/sh", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        full_env = {**os.environ, **_check_env(env), **_check_env(secret_env)}
        what = what or _describe(cmd)
        try:
            result = run_bounded(argv, timeout, env=full_env)
        except subprocess.TimeoutExpired:
            raise CommandError(self.host, what, f"no end within {timeout:g} s") from None
        except OSError as e:
            raise CommandError(self.host, what, f"cannot start: {e}") from None
        if check and result.returncode != 0:
            raise self._fail(what, result)
        return result

    def put(self, local_path: str, remote_path: str, *, timeout: float) -> None:
        _copy(local_path, remote_path)

    def get(self, remote_path: str, local_path: str, *, timeout: float) -> None:
        _copy(remote_path, local_path)

    def port_forward(
        self,
        remote_port: int,
        local_port: int = 0,
        *,
        timeout: float = 30.0,
        remote_host: str = "127.0.0.1",
    ) -> PortForward:
        # The port is already on this machine: nothing to relay.
        return PortForward(remote_port)

    def run_attached(
        self, cmd: Sequence[str] | str, *, env: Mapping[str, str] | None = None, tty: bool = False
    ) -> int:
        argv = ["/bin/sh", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        return subprocess.call(argv, env={**os.environ, **_check_env(env)})


def _copy(src: str, dst: str) -> None:
    if os.path.isdir(src):
        shutil.copytree(src, dst, dirs_exist_ok=True, symlinks=True)
    else:
        os.makedirs(os.path.dirname(os.path.abspath(dst)), exist_ok=True)
        shutil.copy2(src, dst)


def _remote_script(cmd: Sequence[str] | str, env: Mapping[str, str] | None) -> str:
    """The remote shell's line: an argument list quoted word by word (and ``exec``'d), a
    string as written; ``env`` exported first (quoted: values may appear in ``ps``)."""
    script = cmd if isinstance(cmd, str) else "exec " + shlex.join(cmd)
    plain = _check_env(env)
    if plain:
        pairs = " ".join(f"{k}={shlex.quote(v)}" for k, v in plain.items())
        script = f"export {pairs}; {script}"
    return script


class SSHCommandRunner(CommandRunner):
    """A host reached with ``ssh`` (key only, no password prompts: ``BatchMode``). Host keys
    are learnt on first contact into ``known_hosts`` and checked after (``accept-new``): a
    reinstalled host is refused with ssh's own message rather than trusted silently."""

    reaches_by_ssh = True

    def __init__(
        self,
        host: str,
        user: str | None = None,
        private_key: str | None = None,
        *,
        port: int = 22,
        known_hosts: str | None = None,
        proxy_command: str | None = None,
        connect_timeout: float = CONNECT_TIMEOUT_S,
    ) -> None:
        if not _HOST.match(host or ""):
            raise ValueError(f"host {host!r} is not a host name or IP address")
        if user is not None and not _USER.match(user):
            raise ValueError(f"auth.ssh_user {user!r} is not a user name")
        self.host = host
        self.user = user
        self.private_key = os.path.expanduser(private_key) if private_key else None
        if self.private_key and not os.path.isfile(self.private_key):
            raise ValueError(f"auth.ssh_private_key {private_key!r}: no such file")
        self.port = int(port)
        self.known_hosts = os.path.expanduser(known_hosts or "~/.ember/known_hosts")
        self.proxy_command = proxy_command
        self.connect_timeout = max(1, int(connect_timeout))

    @property
    def destination(self) -> str:
        return f"{self.user}@{self.host}" if self.user else self.host

    def ssh_options(self) -> list[str]:
        """ssh's options for this host (no destination): for ssh, and rsync's ``-e``."""
        os.makedirs(os.path.dirname(self.known_hosts) or ".", mode=0o700, exist_ok=True)
        opts = [
            *("-p", str(self.port)),
            *("-o", "BatchMode=yes"),
            *("-o", f"ConnectTimeout={self.connect_timeout}"),
            *("-o", f"ServerAliveInterval={KEEPALIVE_S}"),
            *("-o", "ServerAliveCountMax=3"),
            *("-o", "StrictHostKeyChecking=accept-new"),
            *("-o", f"UserKnownHostsFile={self.known_hosts}"),
            *("-o", "LogLevel=ERROR"),
        ]
        if self.private_key:
            opts += ["-i", self.private_key, "-o", "IdentitiesOnly=yes"]
        if self.proxy_command:
            opts += ["-o", f"ProxyCommand={self.proxy_command}"]
        return opts

    def ssh_argv(self, remote_command: str | None = None, *, tty: bool = False) -> list[str]:
        """The whole ``ssh`` argv; ``remote_command`` is one already-quoted shell string.
        For ``ember attach``: ``ssh_argv(tty=True)`` gives an interactive shell."""
        argv = ["ssh", *self.ssh_options(), *(["-t"] if tty else []), "--", self.destination]
        return argv + ([remote_command] if remote_command is not None else [])

    def run(
        self,
        cmd: Sequence[str] | str,
        *,
        timeout: float,
        env: Mapping[str, str] | None = None,
        secret_env: Mapping[str, str] | None = None,
        check: bool = True,
        what: str | None = None,
    ) -> CommandResult:
        script = _remote_script(cmd, env)
        secrets = _check_env(secret_env)
        stdin = None
        if secrets:
            # NAME=value lines on stdin up to a blank line, exported before the command.
            script = 'while IFS= read -r _kv && [ -n "$_kv" ]; do export "$_kv"; done; ' + script
            stdin = "".join(f"{k}={v}\n" for k, v in secrets.items()).encode() + b"\n"
        what = what or _describe(cmd)
        try:
            result = run_bounded(self.ssh_argv(script), timeout, stdin=stdin)
        except subprocess.TimeoutExpired:
            raise CommandError(self.host, what, f"no end within {timeout:g} s") from None
        except FileNotFoundError:
            raise CommandError(self.host, what, "the ssh client is not installed") from None
        if check and result.returncode != 0:
            raise self._fail(what, result)
        return result

    def run_attached(
        self, cmd: Sequence[str] | str, *, env: Mapping[str, str] | None = None, tty: bool = False
    ) -> int:
        try:
            return subprocess.call(self.ssh_argv(_remote_script(cmd, env), tty=tty))
        except FileNotFoundError:
            raise CommandError(
                self.host, _describe(cmd), "the ssh client is not installed"
            ) from None

    def _rsync(self, src: str, dst: str, timeout: float, what: str) -> None:
        if shutil.which("rsync") is None:
            raise CommandError(self.host, what, "rsync is not installed on this machine")
        argv = [
            "rsync",
            "-a",
            "--protect-args",  # the remote paths are not split or expanded by a remote shell
            f"--timeout={max(5, int(timeout))}",
            "-e",
            shlex.join(["ssh", *self.ssh_options()]),
            "--",
            src,
            dst,
        ]
        try:
            result = run_bounded(argv, timeout)
        except subprocess.TimeoutExpired:
            raise CommandError(self.host, what, f"no end within {timeout:g} s") from None
        if result.returncode != 0:
            raise self._fail(what, result)

    def put(self, local_path: str, remote_path: str, *, timeout: float) -> None:
        self._rsync(
            local_path, f"{self.destination}:{remote_path}", timeout, f"rsync-up {local_path}"
        )

    def get(self, remote_path: str, local_path: str, *, timeout: float) -> None:
        self._rsync(
            f"{self.destination}:{remote_path}", local_path, timeout, f"rsync-down {remote_path}"
        )

    def port_forward(
        self,
        remote_port: int,
        local_port: int = 0,
        *,
        timeout: float = 30.0,
        remote_host: str = "127.0.0.1",
    ) -> PortForward:
        if not _HOST.match(remote_host):
            raise ValueError(f"remote_host {remote_host!r} is not a host name or IP address")
        if local_port == 0:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                local_port = s.getsockname()[1]
        forward = f"127.0.0.1:{int(local_port)}:{remote_host}:{int(remote_port)}"
        argv = ["ssh", *self.ssh_options(), "-N", "-o", "ExitOnForwardFailure=yes"]
        argv += ["-L", forward, "--", self.destination]
        with tempfile.TemporaryFile() as err:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=err, stderr=err)
            handle = PortForward(local_port, proc)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                if proc.poll() is not None:
                    why = _tail(err).strip() or f"ssh exited {proc.returncode}"
                    raise CommandError(self.host, f"port-forward {forward}", why, proc.returncode)
                try:
                    socket.create_connection(("127.0.0.1", local_port), timeout=1).close()
                    return handle
                except OSError:
                    time.sleep(0.1)
            handle.close()
        raise CommandError(self.host, f"port-forward {forward}", f"not ready in {timeout:g} s")


def tmux_socket(cluster_name: str) -> str:
    """The tmux server (``tmux -L``) of ``ember exec --tmux`` on the cluster's head: the
    cluster's own, so ``ember down`` ends it and no one else's."""
    return "ember-" + "".join(c if c.isalnum() or c in "_.-" else "_" for c in cluster_name)


def command_runner_for(config: Mapping[str, object], host: str) -> CommandRunner:
    """The runner for one host of a prepared cluster config (what ``ember up``/``exec``/
    ``rsync-up``/``dashboard`` use): this machine for ``fake_multinode`` (every node is a
    local process) and ``slurm`` (``ember up`` runs the head where it is typed, a login
    node), ssh with the config's ``auth`` and the provider's ``ssh_port`` and
    ``known_hosts`` for every other provider."""
    provider = config["provider"]
    assert isinstance(provider, Mapping)
    if provider.get("type") in LOCAL_HEAD_PROVIDERS:
        return LocalCommandRunner()
    auth = config.get("auth") or {}
    assert isinstance(auth, Mapping)
    return SSHCommandRunner(
        host,
        auth.get("ssh_user"),
        auth.get("ssh_private_key"),
        port=int(provider.get("ssh_port", 22)),
        known_hosts=provider.get("known_hosts"),
        proxy_command=auth.get("ssh_proxy_command"),
    )
