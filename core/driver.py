"""Connecting this process as a driver: ``init``, ``shutdown``, and the state they keep.

``init`` starts a local node (or finds this machine's node of a running cluster) and sets
``global_state.worker`` to a connected CoreWorker (or a LocalModeWorker); ``shutdown`` undoes
both. The rest of the driver API (``ember.api``, remote functions and actor classes) reaches
the worker through ``current_worker``, which runs ``init()`` on first use as Ray does; so this
module sits below them and imports none of them.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import signal
import sys
import threading
from typing import TYPE_CHECKING, Any

from ember import global_state, options
from ember.core_worker.core_worker import DRIVER, CoreWorker
from ember.ids import new_unique_id
from ember.local_mode import LocalModeWorker

if TYPE_CHECKING:
    from ember.log_format import LoggingConfig

logger = logging.getLogger("ember")

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
    logging_config: LoggingConfig | None = None,
    job_config: Any = None,
    **kwargs: Any,
) -> EmberContext:
    """Starts a local node (or, with an address, joins a cluster) and connects this driver."""
    global _node
    unknown = {k for k in kwargs if not k.startswith("_")}
    if unknown:
        raise TypeError(f"ember.init() got an unexpected keyword argument {sorted(unknown)[0]!r}")
    metadata: dict[str, str] = {}
    if job_config is not None:
        from ember.job_config import JobConfig

        if not isinstance(job_config, JobConfig):
            raise TypeError(
                f"job_config must be an ember.job_config.JobConfig, not {type(job_config).__name__}"
            )
        # As Ray: init's own runtime_env and namespace win over the JobConfig's.
        if runtime_env is None:
            runtime_env = job_config.runtime_env or None
        if namespace is None:
            namespace = job_config.ray_namespace
        metadata = dict(job_config.metadata)
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
        if logging_config is not None:
            from ember.log_format import LoggingConfig

            if not isinstance(logging_config, LoggingConfig):
                raise TypeError(
                    "logging_config must be an ember.LoggingConfig(encoding=..., log_level=...),"
                    f" not {type(logging_config).__name__}"
                )
            logging_level = logging_config.log_level
        if configure_logging:
            logging.getLogger("ember").setLevel(logging_level)  # a bad level fails here
        if local_mode:
            global_state.worker = LocalModeWorker(
                num_cpus=num_cpus, num_gpus=num_gpus, resources=resources
            )
            _register_exit_hooks()
            return _context()
        address = address or os.environ.get("EMBER_ADDRESS") or os.environ.get("RAY_ADDRESS")
        options.check_init_joining(address, kwargs)
        if address:
            # Imported here: only a driver joining a running cluster needs it.
            from ember.cluster_connect import connect_info

            node_info = connect_info(address, temp_dir)
        else:
            # Imported here: ember.node (process launching, the dashboard's launcher) is
            # needed only by a driver that starts its own node.
            from ember.core_worker.process_limits import raise_open_files_limit
            from ember.node import LocalNode

            # The driver holds a connection per actor it calls; the node it starts inherits.
            raise_open_files_limit(logging.getLogger("ember"), "driver")

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
                # logging_config's encoding (JSON lines) reaches them the same way.
                env={
                    **(
                        {"EMBER_LOGGING_LEVEL": _level_name(logging_level)}
                        if configure_logging
                        else {}
                    ),
                    **(logging_config.node_env() if logging_config is not None else {}),
                }
                or None,
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
        worker.job_metadata = metadata  # kept with the job in the GCS's table
        job_env = _job_runtime_env(runtime_env)
        try:
            worker.start()
        except BaseException:
            if _node is not None:
                _node.stop()
                _node = None
            raise
        if job_env:
            from ember.runtime_env import upload_local

            try:
                job_env = upload_local(job_env, worker.call_gcs_sync)
            except BaseException:
                shutdown()  # nothing half-started is left behind
                raise
        worker.job_runtime_env = job_env
        _register_exit_hooks()
        return _context()


def _job_runtime_env(given: dict | None) -> dict | None:
    """The job's runtime_env: a submitted job's (its supervisor passes the env_vars the job
    was submitted with, so the job's tasks get them too, not only its driver process) under
    the one given to init()."""
    from ember import runtime_env

    own = runtime_env.validate(given, "ember.init()") if given else {}
    submitted = os.environ.get("EMBER_JOB_ENV_VARS")
    job = {"env_vars": json.loads(submitted)} if submitted else {}
    return runtime_env.merge(job, own) or None


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
        metrics = sys.modules.get("ember.util.metrics")  # only if this process used them
        if worker is not None and metrics is not None:
            metrics.end_session()
        global_state.worker = None
        if worker is not None:
            try:
                worker.shutdown()
            except Exception:
                logger.exception("error while shutting down the driver")
        if _node is not None:
            _node.stop()
            _node = None


def current_worker() -> Any:
    """This process's worker; a first use without ``init`` starts a local node, as in Ray
    (in a driver: a node's worker process whose worker is gone says so instead)."""
    worker = global_state.worker
    if worker is None:
        if global_state.in_worker_process:
            raise RuntimeError(
                "this worker process is not connected to its node (its worker has shut down "
                "or not started): Ember calls work here only while it serves its node; a "
                "worker never starts a node of its own."
            )
        return auto_init()
    return worker
