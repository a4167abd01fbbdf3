"""The CLI's way to the dashboard's REST API (``docs/dashboard-api.md``): the client of
``ember.rest_client`` with its errors as one-line click errors, and the options every
command that talks to a cluster shares (``cluster_options``: ``--address``, ``--token``,
``--temp-dir``). Output (``--format``, tables) is ``output.py``'s."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from typing import Any

import click
from ember.cli.output import FORMATS, cell, dump, emit, format_option, table
from ember.rest_client import DashboardClient, DashboardError, connect_dashboard


class Api(DashboardClient):
    """The dashboard client, its errors turned into click's one-line messages."""

    def open(self, method: str, path: str, params: Any = None, timeout: float | None = None, **kw):
        try:
            return super().open(method, path, params, timeout, **kw)
        except DashboardError as e:
            raise click.ClickException(cli_words(str(e))) from None


# The dashboard's refusals point REST clients at a route that lists what exists; a CLI user
# is pointed at the command that does.
_ROUTE = re.compile(r"`?GET /api/(\w+)[^\s`;,)]*`?(?: lists (?:the \w+|them))?")
_LISTING = {"logs": "ember logs", "placement_groups": "ember list placement-groups"}


def cli_words(message: str) -> str:
    """A dashboard message as the CLI says it: ``GET /api/actors lists the actors`` becomes
    "`ember list actors` lists them"; a 404's "(HTTP 404)" goes (the words say it)."""

    def command(m: re.Match) -> str:
        name = m.group(1)
        return f"`{_LISTING.get(name, f'ember list {name}')}` lists them"

    return _ROUTE.sub(command, message).removesuffix(" (HTTP 404)")


def resolve(
    address: str | None = None, token: str | None = None, temp_dir: str | None = None
) -> Api:
    """The dashboard to talk to, from ``--address``, ``--token``, ``--temp-dir`` (when not
    given, those of the running command: see ``cluster_options``) and the environment."""
    given_token, given_temp_dir = cluster_settings()
    try:
        found = connect_dashboard(address, token or given_token, temp_dir or given_temp_dir)
    except DashboardError as e:
        raise click.ClickException(str(e)) from None
    return Api(found.url, found.token, found.timeout, found.session_dir, found.note)


# What the commands imported from here before output.py held it.
__all__ = [
    "FORMATS",
    "Api",
    "cell",
    "cli_words",
    "cluster_options",
    "cluster_settings",
    "dump",
    "emit",
    "format_option",
    "iter_sse",
    "resolve",
    "table",
]


# -- options shared by the commands that reach a cluster ------------------------------------
_SETTINGS = "ember.cluster_options"


def _remember(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is not None:
        ctx.meta.setdefault(_SETTINGS, {})[param.name] = value
    return value


def cluster_options(fn: Callable) -> Callable:
    """``--address``, ``--token`` and ``--temp-dir``: how a command reaches a cluster. Only
    ``address`` is passed to the command; ``resolve()`` (or ``cluster_settings()``) reads the
    token and temp dir, so a command adopts them by this one decorator."""
    fn = click.option(
        "--temp-dir",
        default=None,
        expose_value=False,
        callback=_remember,
        help="Where to look for local sessions (default: EMBER_TMPDIR, or /tmp/ember-sessions).",
    )(fn)
    fn = click.option(
        "--token",
        default=None,
        expose_value=False,
        callback=_remember,
        help="The cluster token (default: EMBER_TOKEN, or the local session's token file; "
        "the head prints it, and keeps it in <session_dir>/cluster_token).",
    )(fn)
    return click.option(
        "--address",
        default=None,
        help="The cluster's address HOST:PORT (the head's GCS port) or the dashboard's URL "
        "http://HOST:PORT (default: EMBER_ADDRESS, or the newest local cluster).",
    )(fn)


# The name the commands used before --token and --temp-dir joined it.
address_option = cluster_options


def cluster_settings() -> tuple[str | None, str | None]:
    """The running command's ``--token`` and ``--temp-dir`` (None when not given)."""
    ctx = click.get_current_context(silent=True)
    given = ctx.meta.get(_SETTINGS, {}) if ctx is not None else {}
    return given.get("token"), given.get("temp_dir")


def iter_sse(resp: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    """(event, data) pairs of a server-sent-events response, as they arrive."""
    event, data = "message", []
    for raw in resp:
        line = raw.decode("utf-8", "replace").rstrip("\r\n")
        if not line:
            if data:
                try:
                    yield event, json.loads("\n".join(data))
                except ValueError:
                    pass
            event, data = "message", []
        elif line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].strip())
