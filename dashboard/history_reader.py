"""A stopped session's history, read back: the journal ``history_writer`` appended is
replayed, record by record and at each record's time, into a fresh ``DashboardState``
through the same functions that fed the live one (``agent_hub.apply_agent_message``,
``gcs_client.apply_gcs_poll``), so every route reads it as it read the live state.

What the live dashboard asked of agents and the GCS on demand is answered from the session
directory instead: the head node's log files (``HistoryHub``: ``logs/`` read as its agent
read them) and the submitted jobs' records and drivers (``HistoryJobs``). Stacks, profiles
and object listings need live processes: they answer that this is history.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any

from ember.agent.logs import LogDir
from ember.dashboard import history_format as fmt
from ember.dashboard import job_records as jr
from ember.dashboard.agent_hub import LOG_OPS, agent_connected, apply_agent_message
from ember.dashboard.app import AgentUnavailable
from ember.dashboard.gcs_client import apply_gcs_poll
from ember.dashboard.history_archive import read_manifest
from ember.dashboard.history_format import HISTORY_DIR, segments
from ember.dashboard.history_writer import flush_seconds, read_dropped
from ember.dashboard.job_manager import JobError
from ember.dashboard.node_logs import shipped_logs
from ember.dashboard.serve.recorded import recorded_of
from ember.dashboard.state import DashboardState
from ember.dashboard.tune.store import store_of

logger = logging.getLogger("ember.dashboard")
# What the history says of a job whose end it never saw (kept as its last status).
MSG_CLUSTER_STOPPED = (
    "The cluster stopped while this job was {status} (session {session} stopped at {when}); "
    "no end of the job was recorded, so {status} is its last known status, not its outcome. "
    "The job did not fail by itself."
)

# What the history says of a task it never saw end: FAILED at the history's last record.
MSG_TASK_UNFINISHED = (
    "No end of this task was recorded: {why} at {when} while it was not finished (session "
    "{session}). Its processes were ended with the cluster; it is shown FAILED at that time."
)


class NoHistory(LookupError):
    """A path that holds no session history; the message says what was looked for."""


@dataclass
class Session:
    """One session's history, replayed."""

    session_dir: str
    state: DashboardState
    jobs: dict[str, dict[str, Any]]  # {submission id: the last record}
    gcs_jobs: list[dict[str, Any]]  # the GCS's job table as last polled
    started: float
    stopped_at: float
    records: int = 0
    skipped: int = 0  # lines that did not parse (the last one of a killed writer)
    dropped: dict[str, Any] = field(default_factory=dict)  # history_writer's counts
    head_node: str | None = None
    gcs_events: int = 0  # the GCS's cluster events recorded (the poller's place in them)
    left_out: int = 0  # older segments not replayed (``restore``'s bound)
    last_kind: str = ""  # the last record's kind: "stop" when its dashboard stopped cleanly
    archive: dict[str, Any] | None = None  # the manifest, when opened from an archive

    @property
    def name(self) -> str:
        return os.path.basename(self.session_dir.rstrip("/"))

    def summary(self) -> dict[str, Any]:
        return {
            "session_name": self.name,
            "session_dir": self.session_dir,
            "started": self.started,
            "stopped_at": self.stopped_at,
            "records": self.records,
            "skipped_records": self.skipped,
            "dropped": self.dropped,
            "archive": self.archive,
        }


def has_history(path: str) -> bool:
    return bool(segments(os.path.join(path, HISTORY_DIR)))


def find_sessions(path: str) -> list[str]:
    """The session directories under ``path``, oldest first: ``path`` itself if it holds a
    history, else its ``session_*`` directories that do (a temp root: ``--temp-dir``)."""
    path = os.path.abspath(os.path.expanduser(path))
    if not os.path.isdir(path):
        raise NoHistory(f"{path} is not a directory: give a session directory or a temp root")
    if has_history(path):
        return [path]
    found = []
    for name in sorted(os.listdir(path)):
        full = os.path.join(path, name)
        if name.startswith("session_") and not os.path.islink(full) and has_history(full):
            found.append(full)
    if not found:
        raise NoHistory(
            f"no session history under {path}: expected {path}/{HISTORY_DIR}/journal-*, "
            f"{path}/session_*/{HISTORY_DIR}/ or archives {path}/*.tar.gz made by `ember "
            "archive` (the dashboard writes the history while a cluster runs, unless "
            "EMBER_HISTORY=0)"
        )
    return found


def replay(state: DashboardState, session_dir: str, max_bytes: int | None = None) -> Session:
    """Feeds ``session_dir``'s journal into ``state``, each record at its own time (the
    state's clock stays at the last one). With ``max_bytes``, only the newest segments that
    fit in it (an older task's first events are then missing). Takes a while for a long
    session: call it off the loop, or before the state is shared."""
    history_dir = os.path.join(session_dir, HISTORY_DIR)
    now = [0.0]
    state.set_clock(lambda: now[0])
    session = Session(session_dir, state, {}, [], 0.0, 0.0, dropped=read_dropped(history_dir))
    segs = segments(history_dir)
    if max_bytes is not None:
        total, keep = 0, 0
        for _, path in reversed(segs):
            total += os.path.getsize(path)
            if total > max_bytes and keep:
                break
            keep += 1
        session.left_out = len(segs) - keep
        segs = segs[len(segs) - keep :]
    for _, path in segs:
        try:
            for rec in fmt.records(path):
                if rec is None:
                    session.skipped += 1
                    continue
                t, kind, body = rec
                now[0] = t
                session.started = session.started or t
                session.stopped_at = max(session.stopped_at, t)
                session.records += 1
                session.last_kind = kind
                try:
                    _apply(session, kind, body)
                except Exception:  # a record this version cannot apply: skip it, count it
                    session.skipped += 1
        except (OSError, EOFError) as e:  # a damaged compressed segment: what it gave is in
            logger.warning("history segment %s ends early: %s", path, e)
            session.skipped += 1
    session.head_node = _head_node(state, session_dir)
    return session


def load(session_dir: str) -> Session:
    """A stopped session, for the history server: its state stays at the session's end."""
    state = DashboardState()
    session = replay(state, session_dir)
    session.archive = read_manifest(session_dir)
    _end_open_tasks(session)
    state.started = session.started
    if session.head_node:
        # The head's log files are on this disk: index them as they are now (every file the
        # session wrote, not only those its agent last listed).
        logs = LogDir(os.path.join(session_dir, "logs")).index()
        state.set_log_index(session.head_node, logs)
    for nid in state.nodes:
        shipped = shipped_logs(session_dir, nid) if nid != session.head_node else None
        if shipped is not None:
            state.set_log_index(nid, shipped.index())
    return session


def _end_open_tasks(session: Session) -> int:
    """Tasks with no end in the history end FAILED at its last record, saying why: left
    open, a task the cluster stopped under would read RUNNING (or PENDING) forever and run
    across the whole timeline, as if it were still going. How many were ended."""
    if session.archive and session.archive.get("running"):
        why = "the archive was made while the cluster ran"
    else:
        why = "the cluster stopped"
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(session.stopped_at))
    message = MSG_TASK_UNFINISHED.format(why=why, when=when, session=session.name)
    tasks = session.state.tasks
    return sum(
        tasks.fail_open_tasks(job_id, session.stopped_at, message, "WORKER_DIED")
        for job_id in list(tasks.code_tables["job_id"].code)
    )


# What a dashboard started again says when the one before it was killed: what that one
# ingested in its last moments never reached the disk, so the restored state lacks it.
MSG_UNCLEAN_RESTORE = (
    "The dashboard was started again after the previous one died without closing the "
    "session's history (killed or crashed; its last record was written at {when}). What it "
    "received after that (the history writer's last {flush_s:g} s, EMBER_HISTORY_FLUSH_S, or "
    "more on a busy machine) was lost: tasks that ended then are missing or "
    "show an earlier state until their next event, and metrics of that moment are missing."
)


def restore(state: DashboardState, session_dir: str) -> Session | None:
    """A dashboard started again in a running session carries on from what the one before it
    wrote (the newest ``EMBER_HISTORY_RESTORE_MAX_BYTES`` of it, 8 MB of compressed
    segments: ~130,000 tasks, a few seconds), then runs on the wall clock. None when the
    session has no history yet. A history that does not end with the previous dashboard's
    ``stop`` lost that dashboard's last unflushed records: the state gets a WARNING event
    (``HISTORY_GAP``) saying so, since it cannot show what was lost."""
    if not has_history(session_dir):
        return None
    max_bytes = int(os.environ.get("EMBER_HISTORY_RESTORE_MAX_BYTES", str(8 << 20)))
    session = replay(state, session_dir, max_bytes)
    state.set_clock(time.time)
    if session.records and session.last_kind != "stop":
        when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(session.stopped_at))
        message = MSG_UNCLEAN_RESTORE.format(when=when, flush_s=flush_seconds())
        logger.warning("%s", message)
        state.add_event("WARNING", message, source="dashboard", kind="HISTORY_GAP")
    return session


def _apply(session: Session, kind: str, rec: dict[str, Any]) -> None:
    st = session.state
    if kind == "agent":
        apply_agent_message(st, rec["node"], rec["msg"])
    elif kind == "hello":
        agent_connected(st, rec["node"], rec.get("info") or {})
    elif kind == "gone":
        st.agent_gone(rec["node"])
    elif kind == "gcs":
        if "jobs" in rec:
            session.gcs_jobs = rec["jobs"]
        events = rec.get("events") or []
        session.gcs_events += len(events)
        # The job table every poll (unchanged ones were not written): a job's end fails its
        # open tasks once its grace has passed, at the time of this record.
        apply_gcs_poll(
            st,
            rec.get("actors") or [],
            session.gcs_jobs,
            rec.get("cluster"),
            events,
            rec.get("autoscaler"),
        )
    elif kind == "job":
        session.jobs[rec["record"]["submission_id"]] = rec["record"]
    elif kind == "job_deleted":
        session.jobs.pop(rec["submission_id"], None)
    elif kind == "tune":
        store_of(st).apply(rec)
    elif kind == "serve":
        recorded_of(st).apply(st, rec)


def _head_node(state: DashboardState, session_dir: str) -> str | None:
    real = os.path.realpath(session_dir)
    for nid, node in state.nodes.items():
        sd = node.info.get("session_dir")
        if sd and os.path.realpath(sd) == real:
            return nid
    return next((nid for nid, n in state.nodes.items() if n.info.get("is_head")), None)


class HistoryHub:
    """Stands in for the agents' hub: the head's logs are read from the session directory;
    anything else needs the live node and says so."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.links: dict[str, Any] = {}
        self.logs = LogDir(os.path.join(session.session_dir, "logs"))

    def connected_nodes(self) -> list[str]:
        return []

    async def call(self, node_id: str, op: str, body: dict[str, Any], timeout: float) -> Any:
        if op in LOG_OPS and node_id == self.session.head_node:
            return await self.logs.serve(op, body)
        shipped = shipped_logs(self.session.session_dir, node_id) if op in LOG_OPS else None
        if shipped is not None:  # another node's, copied to the head as it was written
            return await shipped.serve(op, body)
        what = f"{op} on node {node_id[:12]}"
        if op in LOG_OPS:
            why = "no copy of its logs reached the head"
        else:
            why = "it needs the node's live processes"
        raise AgentUnavailable(
            f"{what} is not available: this is the history of session {self.session.name} "
            f"(stopped), and {why}"
        )


class HistoryJobs:
    """Stands in for the job manager: the submitted jobs' last records and the drivers of
    the GCS's job table, read-only."""

    def __init__(self, session: Session) -> None:
        self.session = session

    async def find(self, job_id: str) -> dict[str, Any]:
        recs = await self.list()
        for key in ("submission_id", "job_id"):
            rec = next((r for r in recs if r.get(key) == job_id), None)
            if rec is not None:
                return rec
        raise JobError(404, f"Job {job_id} does not exist in session {self.session.name}.")

    async def list(self) -> list[dict[str, Any]]:
        st = self.session.state
        head = st.nodes.get(self.session.head_node or "")
        ip = (head.info.get("node_ip") if head else None) or ""
        drivers = [d for j in self.session.gcs_jobs if (d := jr.driver_details(j, ip))]
        submitted = sorted(self.session.jobs.values(), key=lambda r: r.get("start_time") or 0)
        return [self._as_history(rec) for rec in submitted + drivers]

    def _as_history(self, rec: dict[str, Any]) -> dict[str, Any]:
        """A job the history never saw end (the cluster stopped under it) keeps its last
        status, but says so, and its duration ends at the stop instead of ticking on. It is
        not called FAILED: nothing says it failed by itself."""
        if rec.get("status") in jr.TERMINAL:
            return rec
        stopped = self.session.stopped_at
        when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(stopped))
        message = MSG_CLUSTER_STOPPED.format(
            status=rec.get("status"), session=self.session.name, when=when
        )
        return dict(rec, message=message, end_time=int(stopped * 1000))

    def counts(self) -> dict[str, int]:
        out = dict.fromkeys(jr.STATES, 0)
        for rec in self.session.jobs.values():
            out[rec["status"]] = out.get(rec["status"], 0) + 1
        return out

    async def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise JobError(405, f"session {self.session.name} is history: its jobs cannot change")

    submit = stop = delete = _refuse
