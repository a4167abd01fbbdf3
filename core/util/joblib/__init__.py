"""``ember.util.joblib``: run joblib's ``Parallel`` on Ember (Ray's ``ray.util.joblib``).

    from ember.util.joblib import register_ember
    register_ember()
    with joblib.parallel_config(backend="ember", n_jobs=-1):   # or parallel_backend("ember")
        joblib.Parallel()(joblib.delayed(f)(x) for x in xs)

A program moved from Ray keeps ``register_ray()`` and ``parallel_backend("ray")``: both names
select the same backend. joblib is an optional dependency (``pip install 'ember[joblib]'``).
"""

from __future__ import annotations

try:
    from joblib.parallel import register_parallel_backend
except ImportError as e:  # joblib is optional: say how to get it, not just that it is gone
    raise ImportError(
        "ember.util.joblib needs joblib, which is not installed: "
        "pip install 'ember[joblib]' (or pip install joblib)"
    ) from e

from ember.util.joblib.backend import EmberBackend

__all__ = ["EmberBackend", "register_ember", "register_ray"]


def register_ember() -> None:
    """Registers the backend as ``"ember"`` for ``parallel_backend``/``parallel_config``."""
    register_parallel_backend("ember", EmberBackend)


def register_ray() -> None:
    """For programs written for Ray: registers the same backend as ``"ray"`` (and
    ``"ember"``), so ``parallel_backend("ray")`` runs on Ember."""
    register_parallel_backend("ray", EmberBackend)
    register_ember()
