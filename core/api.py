"""The public functions: ``init``, ``shutdown``, ``remote``, ``get``, ``put``, ``wait``, ...

Ray's names and signatures, so ``import ember as ray`` runs a Ray program unchanged.
"""

from __future__ import annotations

import atexit
import inspect
import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence
from operator import attrgetter
from typing import Any

from ember import global_state, options
from ember.actor import ActorClass, ActorHandle
from ember.core_worker.core_worker import DRIVER, CoreWorker
from ember.exceptions import GetTimeoutError
from ember.ids import new_unique_id
from ember.object_ref import ObjectRef
from ember.remote_function import RemoteFunction

logger = logging.getLogger("ember")
_ref_id = attrgetter("_id")

_state_lock = threading.RLock()
_node = None  # the LocalNode this driver started, if any
_atexit_registered = False
_prev_sigterm: Any = None


class EmberContext(dict):
    """What ``init`` returns: a dict of addresses that also reads as attributes."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    def __enter__(self) -> EmberContext:
        return self

    def __exit__(self, *exc: Any) -> None:
        shutdown()


def init(
    address: str | None = None,
    *,
    num_cpus: float | None = None,
    num_gpus: float | None = None,
    resources: dict[str, float] | None = None,
    memory: float | None = None,
    object_store_memory: int | None = None,
    namespace: str | None = None,
    ignore_reinit_error: bool = False,
    local_mode: bool = False,
    log_to_driver: bool = True,
    logging_level: int | str = logging.INFO,
    temp_dir: str | None = None,
    include_dashboard: bool | None = None,
    dashboard_host: str = "127.0.0.1",
    dashboard_port: int | None = None,
    dashboard_url_prefix: str = "",
    runtime_env: dict | None = None,
    configure_logging: bool = True,
    lru_evict: bool = False,
    driver_object_store_memory: int | None = None,
    **kwargs: Any,
) -> EmberContext:
    """Starts a local node (or, with an address, joins a cluster) and connects this driver."""
    global _node
    unknown = {k for k in kwargs if not k.startswith("_")}
    if unknown:
        raise TypeError(f"ember.init() got an unexpected keyword argument {sorted(unknown)[0]!r}")
    with _state_lock:
        if global_state.worker is not None:
            if ignore_reinit_error:
                logger.info("Calling ember.init() again after it has already been called.")
                return _context()
            raise RuntimeError(
                "Maybe you called ember.init twice by accident? This error can be suppressed by "
                "passing in 'ignore_reinit_error=True' or by calling 'ember.shutdown()' prior to "
                "'ember.init()'."
            )
        if configure_logging:
            logging.getLogger("ember").setLevel(logging_level)  # a bad level fails here
        if local_mode:
            from ember.local_mode import LocalModeWorker

            global_state.worker = LocalModeWorker(
                num_cpus=num_cpus, num_gpus=num_gpus, resources=resources
            )
            _register_exit_hooks()
            return _context()
        address = address or os.environ.get("EMBER_ADDRESS") or os.environ.get("RAY_ADDRESS")
        if address:
            from ember.cluster_connect import connect_info

            node_info = connect_info(address, temp_dir)
        else:
            from ember.node import LocalNode

            node = LocalNode(
                num_cpus=num_cpus,
                num_gpus=num_gpus,
                resources=resources,
                memory=memory,
                object_store_memory=object_store_memory,
                temp_dir=temp_dir,
                tied_to=os.getpid(),
                include_dashboard=include_dashboard,
                dashboard_host=dashboard_host,
                dashboard_port=dashboard_port,
                dashboard_url_prefix=dashboard_url_prefix,
                # The node's processes (and the workers they start) log at the same level.
                env={"EMBER_LOGGING_LEVEL": _level_name(logging_level)}
                if configure_logging
                else None,
            )
            node.start()
            _node = node
            node_info = node.info()
            if node.dashboard_url:
                # Printed, as Ray does, so the URL shows whatever logging is configured.
                print(
                    f"Started a local Ember instance. View the dashboard at {node.dashboard_url}",
                    file=sys.stderr,
                )
        worker = CoreWorker(
            mode=DRIVER,
            node=node_info,
            job_id=new_unique_id()[:8],
            namespace=namespace
            if namespace is not None
            else f"{options.ANONYMOUS_NAMESPACE_PREFIX}{os.getpid()}",
            log_to_driver=log_to_driver,
        )
        try:
            worker.start()
        except BaseException:
            if _node is not None:
                _node.stop()
                _node = None
            raise
        _register_exit_hooks()
        return _context()


def _level_name(level: int | str) -> str:
    """``logging_level`` as the environment carries it: a name where there is one."""
    if isinstance(level, str):
        return level.upper()
    name = logging.getLevelName(level)
    return name if isinstance(name, str) and not name.startswith("Level ") else str(level)


def _context() -> EmberContext:
    worker = global_state.worker
    node = getattr(worker, "node", {}) or {}
    return EmberContext(
        node_id=node.get("node_id", b"").hex() if node.get("node_id") else "",
        session_dir=node.get("session_dir", ""),
        address=node.get("gcs_address", ""),
        raylet_socket_name=node.get("raylet_address", ""),
        node_ip_address=node.get("node_ip", "127.0.0.1"),
        dashboard_url=node.get("dashboard_url", ""),
        webui_url=node.get("dashboard_url", ""),
    )


def _register_exit_hooks() -> None:
    global _atexit_registered, _prev_sigterm
    if not _atexit_registered:
        atexit.register(shutdown)
        _atexit_registered = True
    if threading.current_thread() is threading.main_thread():
        prev = signal.getsignal(signal.SIGTERM)
        if prev is not _on_sigterm:
            _prev_sigterm = prev
            signal.signal(signal.SIGTERM, _on_sigterm)


def _on_sigterm(signum: int, frame: Any) -> None:
    shutdown()
    if callable(_prev_sigterm):
        _prev_sigterm(signum, frame)
    else:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)


def auto_init() -> Any:
    """Ray starts a local node on first use; so do we."""
    init()
    return global_state.worker


def is_initialized() -> bool:
    return global_state.worker is not None


def shutdown(_exiting_interpreter: bool = False) -> None:
    """Disconnects the driver and stops the local node it started. Safe to call twice."""
    global _node
    with _state_lock:
        worker = global_state.worker
        global_state.worker = None
        if worker is not None:
            try:
                worker.shutdown()
            except Exception:
                logger.exception("error while shutting down the driver")
        if _node is not None:
            _node.stop()
            _node = None


def _worker() -> Any:
    worker = global_state.worker
    if worker is None:
        return auto_init()
    return worker


# -- remote ----------------------------------------------------------------------------------
def remote(*args: Any, **kwargs: Any) -> Any:
    """``@ember.remote`` or ``@ember.remote(num_cpus=2, ...)`` on a function or a class."""
    if len(args) == 1 and not kwargs and callable(args[0]):
        return _make_remote(args[0], {})
    if args:
        raise TypeError(
            "The @ember.remote decorator takes either no arguments or keyword arguments "
            "only, e.g. @ember.remote(num_cpus=2)."
        )

    def decorate(target: Any) -> Any:
        return _make_remote(target, kwargs)

    return decorate


def _make_remote(target: Any, opts: dict[str, Any]) -> Any:
    if inspect.isclass(target):
        return ActorClass(target, opts)
    if inspect.isfunction(target) or inspect.isbuiltin(target) or callable(target):
        return RemoteFunction(target, opts)
    raise TypeError(f"@ember.remote takes a function or a class, not {type(target).__name__}")


# -- objects ---------------------------------------------------------------------------------
def put(value: Any, *, _owner: Any = None) -> ObjectRef:
    return _worker().put(value)


def get(object_refs: Any, *, timeout: float | None = None) -> Any:
    """The value(s) of a ref or a list of refs; raises the task's error if it failed."""
    worker = _worker()
    if timeout is not None and timeout < 0:
        raise ValueError("timeout must be non-negative (or None to wait forever)")
    if isinstance(object_refs, ObjectRef):
        return worker.get([object_refs], timeout)[0]
    if isinstance(object_refs, list | tuple):
        for i, r in enumerate(object_refs):
            if not isinstance(r, ObjectRef):
                raise ValueError(
                    f"ember.get() takes an ObjectRef or a list of ObjectRefs; item {i} is a "
                    f"{type(r).__name__}."
                )
        return worker.get(list(object_refs), timeout)
    raise ValueError(
        f"ember.get() takes an ObjectRef or a list of ObjectRefs, not a "
        f"{type(object_refs).__name__}."
    )


def wait(
    object_refs: Sequence[ObjectRef],
    *,
    num_returns: int = 1,
    timeout: float | None = None,
    fetch_local: bool = True,
) -> tuple[list[ObjectRef], list[ObjectRef]]:
    """Returns (ready, not_ready) once ``num_returns`` refs are ready or ``timeout`` passed.

    With ``fetch_local`` (the default, as in Ray) a ref is ready once its object is on this
    node: one in another node's shared memory is pulled here first. With False it is ready
    as soon as it exists anywhere in the cluster, and nothing is pulled.
    """
    if isinstance(object_refs, ObjectRef):
        raise TypeError("wait() expected a list of ObjectRef, got a single ObjectRef")
    if not isinstance(object_refs, list | tuple):
        raise TypeError(f"wait() expected a list of ObjectRef, got {type(object_refs).__name__}")
    refs = list(object_refs)
    # Checked with C-level passes (map, set): wait() is often called in a loop over a long
    # list, one ready ref at a time, and a Python loop here would cost more than the wait.
    if not all(issubclass(kind, ObjectRef) for kind in set(map(type, refs))):
        bad = next(r for r in refs if not isinstance(r, ObjectRef))
        raise TypeError(f"wait() expected a list of ObjectRef, found a {type(bad).__name__}")
    if len(set(map(_ref_id, refs))) != len(refs):
        raise ValueError("Wait requires a list of unique object refs.")
    if num_returns <= 0:
        raise ValueError(f"Invalid number of objects to return {num_returns}.")
    if num_returns > len(refs):
        raise ValueError("num_returns cannot be greater than the number of objects provided.")
    if timeout is not None and timeout < 0:
        raise ValueError("timeout must be non-negative (or None to wait forever)")
    return _worker().wait(refs, num_returns, timeout, fetch_local)


# -- actors ----------------------------------------------------------------------------------
def kill(actor: ActorHandle, *, no_restart: bool = True) -> None:
    """Ends the actor now (running calls fail with ActorDiedError)."""
    if not isinstance(actor, ActorHandle):
        raise ValueError(f"ember.kill() takes an actor handle, not a {type(actor).__name__}")
    worker = _worker()
    if worker.local_mode:
        worker.kill_local_actor(actor)
        return
    reply = worker.call_gcs_sync(
        "kill_actor",
        {
            "actor_id": actor._actor_id,
            "no_restart": no_restart,
            "reason": "ember.kill() was called" + ("" if no_restart else " (restart allowed)"),
        },
    )
    if not reply.get("ok") and "already dead" not in reply.get("message", ""):
        logger.info("kill: %s", reply.get("message"))


def cancel(object_ref: ObjectRef, *, force: bool = False, recursive: bool = True) -> None:
    """Cancels the task that makes the ref; its ``get`` raises TaskCancelledError."""
    if not isinstance(object_ref, ObjectRef):
        raise TypeError(f"ember.cancel() takes an ObjectRef, not {type(object_ref).__name__}")
    worker = _worker()
    if worker.local_mode:
        return
    worker.cancel(object_ref, force)


def get_actor(name: str, namespace: str | None = None) -> ActorHandle:
    """The handle of a named actor; ValueError if there is none by that name."""
    if not name or not isinstance(name, str):
        raise ValueError("get_actor() takes the actor's name, a non-empty string")
    worker = _worker()
    if worker.local_mode:
        return worker.get_local_actor(name)
    ns = worker.namespace if namespace is None else namespace
    info = worker.call_gcs_sync("get_named_actor", {"name": name, "namespace": ns})
    if info is None:
        raise ValueError(
            f"Failed to look up actor with name {name!r} in namespace {ns!r}. This could "
            "because 1. You are trying to look up a named actor you didn't create. 2. The "
            "named actor died. 3. You did not use a namespace matching the namespace of the "
            "actor."
        )
    from ember.ids import actor_handle_object_id

    owner = info["spec_owner"]
    handle_oid = actor_handle_object_id(info["actor_id"])
    worker.refs.on_deserialized(handle_oid, owner)
    handle = ActorHandle(
        info["actor_id"],
        info["class_name"],
        info.get("methods") or {},
        owner,
        info.get("max_task_retries", 0),
        max_pending_calls=info.get("max_pending_calls", -1),
    )
    from ember.actor import _handle_objects

    _handle_objects[handle_oid] = info["actor_id"]
    worker.register_new_borrows()
    return handle


def method(**kwargs: Any):
    from ember.actor import method as _method

    return _method(**kwargs)


# -- cluster ---------------------------------------------------------------------------------
def nodes() -> list[dict[str, Any]]:
    """One dict per node, in Ray's shape (``NodeID``, ``Alive``, ``Resources``, ...)."""
    worker = _worker()
    if worker.local_mode:
        return worker.nodes()
    out = []
    for n in worker.call_gcs_sync("list_nodes", None):
        out.append(
            {
                "NodeID": n["node_id"].hex(),
                "Alive": n["state"] == "ALIVE",
                "NodeManagerAddress": n["node_ip"],
                "NodeManagerHostname": n.get("hostname", ""),
                "NodeManagerPort": _port_of(n.get("tcp_address") or n["address"]),
                "ClientID": n["node_id"].hex(),
                "NodeName": n["node_ip"],
                "Resources": n["resources_total"] if n["state"] == "ALIVE" else {},
                "alive": n["state"] == "ALIVE",
                "IsHead": n.get("is_head", False),
                "ObjectStoreSocketName": n.get("arena_path", ""),
                "RayletSocketName": n["address"],
            }
        )
    return out


def _port_of(address: str) -> int:
    """The TCP port of a ``tcp:host:port`` address; 0 for a Unix socket."""
    return int(address.rsplit(":", 1)[1]) if address.startswith("tcp:") else 0


def cluster_resources() -> dict[str, float]:
    worker = _worker()
    if worker.local_mode:
        return worker.cluster_resources()
    total: dict[str, float] = {}
    for n in worker.call_gcs_sync("list_nodes", None):
        if n["state"] == "ALIVE":
            for k, v in n["resources_total"].items():
                total[k] = total.get(k, 0) + v
    return total


def available_resources() -> dict[str, float]:
    worker = _worker()
    if worker.local_mode:
        return worker.cluster_resources()
    total: dict[str, float] = {}
    local = worker.call_raylet_sync("node_stats", None)
    for n in worker.call_gcs_sync("list_nodes", None):
        if n["state"] != "ALIVE":
            continue
        avail = (
            local["resources_available"]
            if n["node_id"] == worker.node_id
            else n["resources_available"]
        )
        for k, v in avail.items():
            if v > 0:
                total[k] = total.get(k, 0) + v
    return total


def get_gpu_ids() -> list[int]:
    """The GPU ids assigned to the current task or actor (the driver: all it may see)."""
    worker = _worker()
    spec = getattr(worker.current, "spec", None) if not worker.local_mode else None
    if spec is not None and spec.gpu_ids:
        return list(spec.gpu_ids)
    executor = getattr(worker, "executor", None)
    actor_spec = getattr(executor, "actor_spec", None)
    if actor_spec is not None and actor_spec.gpu_ids:
        return list(actor_spec.gpu_ids)
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if worker.mode == DRIVER if hasattr(worker, "mode") else True:
        if visible:
            return [int(x) for x in visible.split(",") if x.strip().isdigit()]
    return []


def timeline(filename: str | None = None) -> Any:
    from ember.chrome_trace import timeline as _timeline

    return _timeline(filename)


def get_runtime_context() -> Any:
    from ember.runtime_context import RuntimeContext

    return RuntimeContext(_worker())


__all__ = [
    "CoreWorker",
    "GetTimeoutError",
    "available_resources",
    "cancel",
    "cluster_resources",
    "get",
    "get_actor",
    "get_gpu_ids",
    "get_runtime_context",
    "init",
    "is_initialized",
    "kill",
    "method",
    "nodes",
    "put",
    "remote",
    "shutdown",
    "timeline",
    "wait",
]
