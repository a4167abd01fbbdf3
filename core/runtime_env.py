"""``runtime_env``: what a job, task or actor runs with, as Ray's keys name it.

Supported: ``env_vars`` (applied to the task for its run, to an actor for its life),
``working_dir`` and ``py_modules`` (packages on every node: ``ember.runtime_env_packages``;
a task's import path and, for ``working_dir``, its current directory), ``excludes`` (what
packing a local ``working_dir`` leaves out) and ``config``. Ray's other plugins (``pip``,
``conda``, ``uv``, ``container``, ...) are refused by name rather than ignored: a program that
needs them would otherwise run without them and fail later, far from the cause.

A task or actor inherits its parent's (the job's, from ``init(runtime_env=...)``, or the
submitting task's); its own fields replace the parent's, except ``env_vars``, which are
merged (its own win), as Ray merges them.
"""

from __future__ import annotations

import os
from typing import Any

SUPPORTED = ("env_vars", "working_dir", "py_modules", "excludes", "config")
# Ray's plugins Ember does not have: named in the error rather than silently ignored.
UNSUPPORTED = (
    "pip",
    "conda",
    "uv",
    "container",
    "image_uri",
    "java_jars",
    "nsight",
    "mpi",
    "py_executable",
    "rocprof_sys",
)


def validate(runtime_env: Any, what: str) -> dict[str, Any]:
    """``runtime_env`` checked (ValueError naming the problem and the fix); a copy."""
    if runtime_env is None:
        return {}
    if not isinstance(runtime_env, dict):
        raise TypeError(f"runtime_env of {what} must be a dict, got {type(runtime_env).__name__}")
    for key in runtime_env:
        if key in UNSUPPORTED:
            raise ValueError(
                f"runtime_env {key!r} of {what} is not supported by Ember: install what it "
                f"would install into the cluster's Python environment instead (supported: "
                f"{', '.join(SUPPORTED)})"
            )
        if key not in SUPPORTED:
            raise ValueError(
                f"unknown runtime_env field {key!r} of {what}; supported: {', '.join(SUPPORTED)}"
            )
    env = runtime_env.get("env_vars")
    if env is not None and (
        not isinstance(env, dict)
        or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items())
    ):
        raise TypeError(f"runtime_env env_vars of {what} must be a dict of str to str")
    modules = runtime_env.get("py_modules")
    if modules is not None and not isinstance(modules, list | tuple):
        raise TypeError(f"runtime_env py_modules of {what} must be a list")
    for path in [runtime_env.get("working_dir")] + list(modules or ()):
        # Ray's rule: a path is a string (a local directory or a package URI).
        if path is not None and not isinstance(path, str | os.PathLike):
            key = "working_dir" if path is runtime_env.get("working_dir") else "py_modules"
            raise TypeError(
                f"runtime_env {key} of {what} must be a string (a local path or a URI), "
                f"got {type(path).__name__} {path!r}"
            )
    return dict(runtime_env)


class RuntimeEnv(dict):
    """Ray's ``RuntimeEnv``: a runtime_env as a dict, built from its fields as keywords and
    checked as ``runtime_env=`` is (``RuntimeEnv(env_vars={"A": "1"})``)."""

    def __init__(self, **fields: Any) -> None:
        super().__init__(validate({k: v for k, v in fields.items() if v is not None}, "RuntimeEnv"))


def merge(parent: dict[str, Any] | None, child: dict[str, Any] | None) -> dict[str, Any] | None:
    """The child's runtime_env over its parent's (env_vars merged, the child's winning)."""
    if not parent:
        return child or None
    if not child:
        return parent
    out = {**parent, **child}
    if "env_vars" in parent and "env_vars" in child:
        out["env_vars"] = {**parent["env_vars"], **child["env_vars"]}
    return out


_UPLOADED: dict[tuple, str] = {}  # {(directory, excludes, as a module): gcs:// URI}


def upload_local(env: dict[str, Any], call_gcs: Any) -> dict[str, Any]:
    """``env`` with its local ``working_dir`` and ``py_modules`` directories packed and put on
    the head (``ember.runtime_env_packages.upload``), named by ``gcs://`` URIs every node can
    fetch. Each directory is packed once per process (a task's options name the same one on
    every call)."""
    if not env.get("working_dir") and not env.get("py_modules"):
        return env
    from ember import runtime_env_packages as packages

    excludes = tuple(env.get("excludes") or ())

    def uri(path: str, module: bool) -> str:
        if "://" in path:
            return path
        key = (os.path.realpath(os.path.expanduser(path)), excludes, module)
        if key not in _UPLOADED:
            if module and path.endswith(".py") and os.path.isfile(key[0]):
                data = packages.zip_file(path)  # a one-file module, as Ray takes it
            else:
                data = packages.zip_directory(path, list(excludes), include_parent_dir=module)
            _UPLOADED[key] = packages.upload(call_gcs, data)
        return _UPLOADED[key]

    out = dict(env)
    if env.get("working_dir"):
        out["working_dir"] = uri(str(env["working_dir"]), False)
    if env.get("py_modules"):
        # A module's package holds its directory, so the folder it is unpacked in goes on
        # the import path (Ray's include_parent_dir).
        out["py_modules"] = [uri(str(m), True) for m in env["py_modules"]]
    return out


def inherited_env(worker: Any, own: dict[str, Any] | None) -> dict[str, Any] | None:
    """The runtime_env a task or actor submitted now runs with: ``own`` over its parent's
    (the running task's or actor's, else the job's). None when there is none at all."""
    current = getattr(worker, "current", None)
    spec = getattr(current, "spec", None)
    if spec is not None and spec.kind != 0:  # an actor's call: the actor's own
        spec = getattr(getattr(worker, "executor", None), "actor_spec", None)
    parent = spec.runtime_env if spec is not None else getattr(worker, "job_runtime_env", None)
    if not parent and not own:
        return None
    if own:
        own = upload_local(own, worker.call_gcs_sync)
    return merge(parent, own)


def env_key(env: dict[str, Any] | None) -> str:
    """What tells runtime_envs apart for the raylet's workers: the env as sorted JSON ("" for
    none), so equal envs share workers and different ones never do."""
    if not env:
        return ""
    import json

    return json.dumps(env, sort_keys=True, default=str)


class EnvVars:
    """Applies ``env_vars`` to this process and puts back what they replaced."""

    def __init__(self, env_vars: dict[str, str]) -> None:
        self.saved = {k: os.environ.get(k) for k in env_vars}
        os.environ.update(env_vars)

    def restore(self) -> None:
        environ = os.environ
        for k, v in self.saved.items():
            if v is None:
                environ.pop(k, None)
            else:
                environ[k] = v
