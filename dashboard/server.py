"""The dashboard process (head node): uvicorn serving the FastAPI app, the gRPC server the
agents stream to, and the GCS poller, all on one asyncio loop (so the state needs no locks).

It binds ``--port`` (8265 by default) or, when taken, the next free port and says so; it tells
the process that started it ``<url> <agent gRPC address>`` on the ready pipe.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import faulthandler
import gc
import json
import logging
import os
import secrets
import signal
import socket
from collections.abc import Iterator

from ember import config
from ember.cluster_token import user_token
from ember.dashboard import history_reader, history_writer
from ember.dashboard.agent_hub import AgentHub
from ember.dashboard.app import DashboardContext, create_app
from ember.dashboard.auth import CLUSTER_TOKEN_PLACE, DASHBOARD_TOKEN_PLACE, ENV_TOKEN_PLACE
from ember.dashboard.gcs_client import GcsClient
from ember.dashboard.node_logs import NodeLogs
from ember.dashboard.routes.frontend import default_frontend_dir
from ember.dashboard.state import DashboardState
from ember.launch import DEFAULT_PORT, bind_port, dashboard_url, url_prefix_of
from ember.listen_rules import rule_for

logger = logging.getLogger("ember.dashboard")
# How long a stopping dashboard may take (a SIGTERM, its parent's death) before it exits
# anyway: its own waits add to ~8.5 s at most (gRPC's grace, uvicorn's 3 s, the history
# writer's 5 s).
STOP_DEADLINE_S = 9.0


def load_token(host: str, session_dir: str, token_file: str | None) -> str | None:
    """Loopback: no token. Otherwise (``listen_rules``: "" and the wildcards are reachable) the
    cluster token (file, or the user's EMBER_TOKEN), or a new one written to
    ``<session_dir>/dashboard_token`` (mode 0600)."""
    if not rule_for(host, cluster=False).token_required:
        return None
    if token_file:
        return read_token_file(token_file)
    if user_token():
        return user_token()
    path = os.path.join(session_dir, "dashboard_token")
    if os.path.exists(path):  # a dashboard restarted in this session keeps the first's token
        return read_token_file(path)
    token = secrets.token_urlsafe(24)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    return token


def token_place(host: str, token_file: str | None) -> str:
    """Where ``load_token`` found the token, as a 401 tells a user who lacks it."""
    if token_file:
        return CLUSTER_TOKEN_PLACE
    if rule_for(host, cluster=False).token_required and user_token():
        return ENV_TOKEN_PLACE
    return DASHBOARD_TOKEN_PLACE


def read_token_file(path: str) -> str:
    with open(path) as f:
        return f.read().strip()


def _idle_closing_h11() -> type:
    """uvicorn's h11 protocol, closing a connection that sends nothing within the
    pre-authentication deadline (``ember.protocol.preauth``): uvicorn arms its idle timer only
    after a first response, so a connection that never sent a request stayed open for good.
    The timer is uvicorn's own keep-alive one, cancelled by the first bytes of a request."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class IdleClosingH11(H11Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:  # type: ignore[override]
            super().connection_made(transport)  # type: ignore[arg-type]
            self.timeout_keep_alive_task = self.loop.call_later(
                config.auth_deadline_seconds, self.timeout_keep_alive_handler
            )

    return IdleClosingH11


def _stop_on_signals(loop: asyncio.AbstractEventLoop) -> asyncio.Event:
    """SIGTERM and SIGINT, from the first moment the loop runs, set the returned event and
    start the stop's deadline (``STOP_DEADLINE_S``). A Python-level handler, which runs at
    the main thread's next bytecode even while start-up keeps the loop busy: a parent
    killed while we start (its death is our SIGTERM) must not leave us running."""
    stop = asyncio.Event()

    def on_signal(signum: int, frame: object) -> None:
        _arm_stop_deadline()
        loop.call_soon_threadsafe(stop.set)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    return stop


_deadline_armed = False


def _arm_stop_deadline() -> None:
    """Once, as the stop begins: whatever it then waits on, the process is gone within
    ``STOP_DEADLINE_S``, each thread's stack written to stderr (logs/dashboard.err) to say
    what held it. A second signal does not push the deadline back."""
    global _deadline_armed
    if not _deadline_armed:
        _deadline_armed = True
        faulthandler.dump_traceback_later(STOP_DEADLINE_S, exit=True)


@contextlib.contextmanager
def _no_signal_capture() -> Iterator[None]:
    """For uvicorn's ``Server.capture_signals``: the signals are ours (``_stop_on_signals``);
    uvicorn's would take a SIGTERM for itself while it serves."""
    yield


@dataclasses.dataclass
class _Parts:
    """What start-up made so far: the stop closes what exists, whenever it comes."""

    tasks: list[asyncio.Future] = dataclasses.field(default_factory=list)
    agent_stop: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    state: DashboardState | None = None
    writer: history_writer.HistoryWriter | None = None
    hub: AgentHub | None = None
    node_logs: NodeLogs | None = None
    ctx: DashboardContext | None = None
    server: object | None = None  # uvicorn.Server
    serving: asyncio.Future | None = None


async def serve(args: argparse.Namespace) -> None:
    """Starts, serves until SIGTERM/SIGINT (or uvicorn ends by itself), and stops. A signal
    during start-up stops it at once, whatever start-up was waiting on (a GCS that died with
    the parent whose death is the signal), closing what it had made."""
    stop = _stop_on_signals(asyncio.get_running_loop())
    parts = _Parts()
    starting = asyncio.ensure_future(_start(args, parts))
    stopped = asyncio.ensure_future(stop.wait())
    await asyncio.wait({starting, stopped}, return_when=asyncio.FIRST_COMPLETED)
    if starting.done():
        starting.result()  # a start that failed ends the process with its error
        assert parts.serving is not None
        await asyncio.wait({stopped, parts.serving}, return_when=asyncio.FIRST_COMPLETED)
    else:
        logger.info("stopped while starting")
        starting.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await starting
    stopped.cancel()
    _arm_stop_deadline()  # (a stop by signal armed it already; serving may end by itself)
    await _close(parts)


async def _start(args: argparse.Namespace, parts: _Parts) -> None:
    """Everything up to serving and saying so on the ready pipe, each part put in ``parts``
    as it is made."""
    import uvicorn
    from ember.process_util import signal_ready

    token = load_token(args.host, args.session_dir, args.token_file)
    # The agents' hub may listen elsewhere than the HTTP port: a cluster head's hub binds the
    # node IP, since the agents of other machines stream to it, while the browser's port stays
    # on loopback. A cluster's hub (it has the token file) always demands the token, even on
    # loopback, which other users of the machine share: every agent of a cluster has it, and
    # what the hub ingests is shown as the cluster's state. Off loopback it demands one anyway.
    agent_host = args.agent_host or args.host
    hub_token = None
    if args.token_file:
        hub_token = token or read_token_file(args.token_file)
    elif not agent_host.startswith("unix:") and rule_for(agent_host, cluster=False).reachable:
        hub_token = token or load_token(agent_host, args.session_dir, None)
    state = parts.state = DashboardState()
    # A dashboard started again in its session (the raylet restarts a dead one) carries on
    # from the session's history, before anything else touches the state.
    restored = (
        await asyncio.to_thread(history_reader.restore, state, args.session_dir)
        if history_writer.enabled()
        else None
    )
    if restored is not None:
        logger.info(
            "restored %d records of the session's history (%d older segments left out)",
            restored.records,
            restored.left_out,
        )
    # The session's history on disk (history_writer): what the state ingests, appended.
    writer = parts.writer = history_writer.attach(state, args.session_dir)
    if writer is not None:
        state.record("start", {"session_dir": args.session_dir, "pid": os.getpid()})
    hub = AgentHub(state, hub_token)
    # Other nodes' logs, kept here as their agents send them (node_logs.py).
    hub.node_logs = NodeLogs(args.session_dir, state) if history_writer.enabled() else None
    parts.node_logs = hub.node_logs
    agent_address = await hub.start(agent_host, args.agent_port)
    parts.hub = hub
    gcs_token = token or hub_token
    gcs = (
        GcsClient(args.gcs_address, state, gcs_token.encode() if gcs_token else None)
        if args.gcs_address
        else None
    )
    if gcs is not None and restored is not None:
        gcs.resume_events(restored.gcs_events)  # the GCS's events already in the history
    ctx = parts.ctx = DashboardContext(
        state=state,
        hub=hub,
        gcs=gcs,
        host=args.host,
        prefix=url_prefix_of(args.url_prefix),
        session_dir=args.session_dir,
        frontend_dir=default_frontend_dir(),
    )
    if args.fd >= 0:  # bound by whoever started us (ember.launch)
        sock = socket.socket(fileno=args.fd)
        port = sock.getsockname()[1]
    else:
        sock, port = bind_port(args.host, args.port)
        if args.port and port != args.port:
            logger.warning("port %d is taken; the dashboard uses %d", args.port, port)
    ctx.port = port
    app = create_app(ctx, token, token_place(args.host, args.token_file))
    config = uvicorn.Config(
        app,
        loop="asyncio",
        lifespan="off",
        log_level="warning",
        access_log=False,
        ws_max_size=1 << 20,
        timeout_keep_alive=30,
        http=_idle_closing_h11(),
    )
    server = parts.server = uvicorn.Server(config)
    server.install_signal_handlers = lambda: None  # the signals are ours (uvicorn < 0.29)
    server.capture_signals = _no_signal_capture  # (uvicorn >= 0.29)
    url = dashboard_url(args.host, port, ctx.prefix)
    from ember.dashboard.prometheus import service_discovery_loop

    tasks = parts.tasks
    tasks.append(asyncio.ensure_future(service_discovery_loop(ctx)))  # Prometheus file SD
    if gcs is not None:
        try:
            await gcs.put_kv("agent_address", agent_address)
            await gcs.put_kv("url", url)
        except Exception as e:
            logger.warning("could not publish the dashboard's address in the GCS: %s", e)
        tasks.append(asyncio.ensure_future(gcs.poll_loop()))
        # Jobs a previous dashboard left running are watched again (their records are in
        # the GCS KV); the driver connection is made only if there are any.
        from ember.dashboard.job_manager import JobManager

        ctx.extra["jobs"] = JobManager(ctx)
        tasks.append(asyncio.ensure_future(_recover_jobs(ctx.extra["jobs"])))
        from ember.dashboard.tune.store import poll_loop as tune_poll_loop

        tasks.append(asyncio.ensure_future(tune_poll_loop(ctx)))  # the Tune view's experiments
    tasks.append(asyncio.ensure_future(_freeze_gc()))
    if args.node_agent:  # this node's agent runs here (see ember.agent)
        tasks.append(asyncio.ensure_future(_run_node_agent(args.node_agent, hub, parts.agent_stop)))
    serving = parts.serving = asyncio.ensure_future(server.serve(sockets=[sock]))
    while not server.started and not serving.done():
        await asyncio.sleep(0.02)
    if serving.done():
        serving.result()
    signal_ready(args.ready_fd, f"{url} {agent_address}")


async def _close(parts: _Parts) -> None:
    """The stop: every part start-up made, closed in the order that loses nothing."""
    jobs = parts.ctx.extra.get("jobs") if parts.ctx is not None else None
    if jobs is not None:
        jobs.shutting_down = True  # (before anything else: the job_manager's _end says why)
    if parts.server is not None:
        parts.server.should_exit = True  # type: ignore[attr-defined]
    parts.agent_stop.set()
    await asyncio.sleep(0)  # the agent closes its socket and its link before the cancels
    for t in parts.tasks:
        t.cancel()
    if parts.hub is not None:
        await parts.hub.stop()
    if parts.serving is not None:
        try:
            await asyncio.wait_for(parts.serving, 3.0)
        except (TimeoutError, asyncio.CancelledError):
            pass
    if parts.writer is not None:
        assert parts.state is not None
        parts.state.record("stop", {})
        await asyncio.to_thread(parts.writer.close)
    if parts.node_logs is not None:
        await asyncio.to_thread(parts.node_logs.close)


async def _run_node_agent(argv_json: str, hub: AgentHub, stop: asyncio.Event) -> None:
    """The head node's agent, on this loop, restarted when it fails (within a budget); each
    failure is an event on the dashboard, since no process exit will show it."""
    from ember.agent.agent import Agent
    from ember.agent.process import parse_args as agent_args
    from ember.process_util import log_to_own_file
    from ember.raylet.child_supervisor import keep_running

    args = agent_args(json.loads(argv_json))
    log_to_own_file("ember.agent", os.path.join(args.session_dir, "logs", "agent.log"))

    async def run_once() -> None:
        await Agent(args, hub=hub).serve_node(stop)

    def on_death(error: BaseException, restarting: bool) -> None:
        logger.error("the node's agent failed: %r", error, exc_info=error)
        what = "restarting it" if restarting else "it failed too often: not restarting it"
        hub.state.add_event(
            "ERROR",
            f"the head node's agent (in the dashboard's process) failed: {error!r}; {what}",
            source="dashboard",
            kind="AGENT_FAILED",
        )

    await keep_running(run_once, stop, on_death)


async def _recover_jobs(jobs: object) -> None:
    try:
        await jobs.recover()  # type: ignore[attr-defined]
    except Exception as e:  # the Jobs API retries on its first call
        jobs._loaded = False  # type: ignore[attr-defined]
        logger.warning("could not load the jobs' records from the GCS: %s", e)


async def _freeze_gc() -> None:
    """Keeps the cyclic GC off the state: a million task records would make every full
    collection a pause of hundreds of ms (the p99 of every request). The records hold no
    cycles, so reference counting still frees them; ``gc.freeze`` just stops re-scanning
    the long-lived ones."""
    from ember.process_util import trim_heap

    gc.set_threshold(50_000, 50, 100)
    while True:
        await asyncio.sleep(5.0)
        gc.freeze()
        trim_heap()  # give back what decoded batches freed, so RSS shows the state's size


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="ember-dashboard")
    p.add_argument("--session-dir", required=True)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help="0: any free port")
    p.add_argument(
        "--agent-host",
        default="",
        help="where the agents' gRPC hub listens (default: --host); off loopback it needs the token",
    )
    p.add_argument("--agent-port", type=int, default=0, help="gRPC port the agents stream to")
    p.add_argument("--fd", type=int, default=-1, help="a listening socket to serve HTTP on")
    p.add_argument("--gcs-address", default="")
    p.add_argument("--url-prefix", default="")
    p.add_argument("--token-file", default=None)
    p.add_argument(
        "--node-agent",
        default="",
        help="JSON list: the arguments of this node's agent, to run in this process",
    )
    p.add_argument("--ready-fd", type=int, default=-1)
    p.add_argument("--parent-pid", type=int, default=0)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    from ember.process_util import die_with_parent, setup_process_logging

    setup_process_logging(os.path.join(args.session_dir, "logs", "dashboard.log"))
    if args.parent_pid:
        die_with_parent(args.parent_pid)
    # Slightly below the tasks, not at the bottom: a busy node is when its user opens the
    # dashboard. At nice 19 the scheduler's weights give it ~1.5% of a core beside one busy
    # worker; at 5 about a third. The agent, whose event pipeline can lag (its buffers are
    # bounded), stays at 19.
    os.nice(int(os.environ.get("EMBER_DASHBOARD_NICE", "5")))
    asyncio.run(serve(args))
    # Served and stopped: skip the interpreter's teardown of ~500 modules and gRPC's, which
    # took ~0.25 s of every shutdown(); nothing is left to flush but the log.
    logging.shutdown()
    os._exit(0)


if __name__ == "__main__":
    main()
