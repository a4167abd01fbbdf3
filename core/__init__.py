"""Ember: an operations-first distributed runtime for Python, in the model of Ray.

``import ember as ray`` runs a Ray program: tasks (``@ember.remote`` functions), actors
(``@ember.remote`` classes) and objects (``put``/``get``/``wait`` on ``ObjectRef``s), on one
machine or a cluster.
"""

from ember import exceptions
from ember.actor import ActorClass, ActorHandle
from ember.api import (
    available_resources,
    cancel,
    cluster_resources,
    get,
    get_actor,
    get_gpu_ids,
    get_runtime_context,
    init,
    is_initialized,
    kill,
    method,
    nodes,
    put,
    remote,
    shutdown,
    timeline,
    wait,
)
from ember.object_ref import ObjectID, ObjectRef
from ember.profiling import profile

__version__ = "0.1.0"

from ember import (  # noqa: E402  (submodules users reach as ember.actor, ember.util)
    actor,
    experimental,
    plain_function_hint,  # noqa: E402
    util,
)

plain_function_hint.install()

__all__ = [
    "ActorClass",
    "ActorHandle",
    "ObjectID",
    "ObjectRef",
    "actor",
    "available_resources",
    "cancel",
    "cluster_resources",
    "exceptions",
    "experimental",
    "get",
    "get_actor",
    "get_gpu_ids",
    "get_runtime_context",
    "init",
    "is_initialized",
    "kill",
    "method",
    "nodes",
    "profile",
    "put",
    "remote",
    "shutdown",
    "timeline",
    "util",
    "wait",
]
