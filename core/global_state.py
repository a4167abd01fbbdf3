"""The process's one core worker (driver or worker), set by ``init`` and by the worker main.

Kept in its own module so that low-level modules (``object_ref``, ``serialization``) can reach
the worker without importing the runtime.
"""

from __future__ import annotations

from typing import Any

worker: Any = None  # ember.core_worker.core_worker.CoreWorker | None
# Set by the worker main: this process is a node's worker, which never starts a node itself.
in_worker_process = False


def require_worker() -> Any:
    if worker is None:
        raise RuntimeError(
            "Ember is not running in this process: call ember.init() first "
            "(or ember.init(address='auto') to join a running cluster)."
        )
    return worker
