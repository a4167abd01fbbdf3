"""Ray's ``ray.job_config.JobConfig``: what ``ember.init(job_config=...)`` says of the job.

Honoured: ``runtime_env`` (the job's, as ``init(runtime_env=...)``, which wins when both are
given, as in Ray), ``ray_namespace`` (as ``init(namespace=...)``), ``metadata`` (kept with
the job in the GCS's job table). ``default_actor_lifetime="detached"`` is refused: Ember's
actors are detached only by ``lifetime="detached"`` on each. ``jvm_options`` and
``code_search_path`` concern Java workers, which Ember does not run: kept, unused.
"""

from __future__ import annotations

from typing import Any

_LIFETIMES = ("non_detached", "detached")


class JobConfig:
    def __init__(
        self,
        jvm_options: list[str] | None = None,
        code_search_path: list[str] | None = None,
        runtime_env: dict | None = None,
        _client_job: bool = False,
        metadata: dict[str, str] | None = None,
        ray_namespace: str | None = None,
        default_actor_lifetime: str = "non_detached",
        _py_driver_sys_path: list[str] | None = None,
    ) -> None:
        self.jvm_options = list(jvm_options or [])
        self.code_search_path = list(code_search_path or [])
        self.runtime_env: dict = dict(runtime_env or {})
        self.metadata: dict[str, str] = dict(metadata or {})
        self.ray_namespace = ray_namespace
        self.set_default_actor_lifetime(default_actor_lifetime)
        self._py_driver_sys_path = list(_py_driver_sys_path or [])

    def set_metadata(self, key: str, value: str) -> None:
        self.metadata[key] = value

    def set_runtime_env(self, runtime_env: dict | None, validate: bool = False) -> None:
        self.runtime_env = dict(runtime_env or {})
        if validate:
            from ember import runtime_env as envs

            envs.validate(self.runtime_env, "JobConfig.runtime_env")

    def set_ray_namespace(self, ray_namespace: str) -> None:
        self.ray_namespace = ray_namespace

    def set_default_actor_lifetime(self, default_actor_lifetime: str) -> None:
        if default_actor_lifetime not in _LIFETIMES:
            raise ValueError(
                f"default_actor_lifetime must be one of {_LIFETIMES}, "
                f"not {default_actor_lifetime!r}"
            )
        if default_actor_lifetime == "detached":
            raise ValueError(
                "default_actor_lifetime='detached' is not supported by Ember: give each actor "
                "that should outlive its driver lifetime='detached' (Actor.options("
                "lifetime='detached', name=...))."
            )
        self.default_actor_lifetime = default_actor_lifetime

    @classmethod
    def from_json(cls, job_config_json: dict[str, Any]) -> JobConfig:
        """Ray's dict form (``runtime_env``, ``metadata``, ``ray_namespace``, ...)."""
        return cls(**job_config_json)
