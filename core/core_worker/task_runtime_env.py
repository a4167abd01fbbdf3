"""A task's or actor's ``runtime_env`` applied in the worker that runs it (``ember.runtime_env``
says what each field means): ``env_vars`` set in the process environment, ``py_modules``
first on the import path and ``working_dir`` the current directory and on the import path,
both from this node's copy of their package (``ember.runtime_env_packages``). A task's are
undone after it (``AppliedEnv.restore``: workers are reused); an actor keeps its own."""

from __future__ import annotations

import os
import sys
from typing import Any

from ember import runtime_env_packages as packages
from ember.exceptions import RuntimeEnvSetupError
from ember.runtime_env import EnvVars


class AppliedEnv:
    def __init__(self) -> None:
        self.env_vars: EnvVars | None = None
        self.cwd: str | None = None
        self.paths: list[str] = []

    def restore(self) -> None:
        if self.env_vars is not None:
            self.env_vars.restore()
        if self.cwd is not None:
            os.chdir(self.cwd)
        for p in self.paths:
            try:
                sys.path.remove(p)
            except ValueError:
                pass


def applied_env(spec: Any, executor: Any) -> AppliedEnv:
    """The spec's runtime_env applied; RuntimeEnvSetupError (with nothing left applied) when
    it cannot be: the task's error, never the worker's end."""
    out = AppliedEnv()
    try:
        _apply(spec.runtime_env, executor, out)
    except Exception as e:
        out.restore()
        raise RuntimeEnvSetupError(
            f"The runtime_env of {spec.display_name()}() could not be set up: "
            f"{type(e).__name__}: {e}"
        ) from e
    return out


def _apply(env: dict, executor: Any, out: AppliedEnv) -> None:
    if env.get("env_vars"):
        out.env_vars = EnvVars(env["env_vars"])
    host = executor.host
    uris = [(u, "py_modules_files") for u in env.get("py_modules") or ()]
    if env.get("working_dir"):
        uris.append((env["working_dir"], "working_dir_files"))
    if not uris:
        return
    fetch = packages.fetch_through(host.call_gcs_sync)
    session = host.node["session_dir"]
    for uri, kind in uris:
        protocol, _, name = str(uri).partition("://")
        if protocol != "gcs" or not name:
            raise ValueError(
                f"runtime_env {kind.removesuffix('_files')} {uri!r} is not a package this "
                "cluster holds (gcs://...): pass a local directory to the driver's "
                "init(runtime_env=...) or .options(runtime_env=...), which uploads it"
            )
        path = packages.ensure(session, kind, name, fetch)
        if path not in sys.path:
            sys.path.insert(0, path)
            out.paths.append(path)
        if kind == "working_dir_files":
            cwd = os.getcwd()
            os.chdir(path)
            out.cwd = cwd
