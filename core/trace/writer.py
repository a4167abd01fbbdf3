"""The timeline: a Chrome trace (chrome://tracing, Perfetto, speedscope) of the cluster's tasks,
written as a stream so a million tasks cost the writer bounded memory, read by ``ember.timeline()``, ``ember timeline`` and the dashboard's ``/api/timeline``.

Layout (as Ray's timeline: Chrome's trace format): a process per node, a thread per worker (its pid), a
slice per task with its phases nested inside (fetching args, executing, storing outputs); the
wait for resources (submitted until pushed to a worker) as an async slice of the node, since
it overlaps whatever that worker ran before; ``ember.profile`` spans on the thread that ran
them; flow arrows from a task to the tasks it submitted and from an object's producer to the
tasks that consumed it; object transfers between nodes as slices of a "transfers" thread;
the cluster's own marks (``TimelineStore.marks``: the autoscaler's scaling decisions) as
instant events on a row of their own.

The writer reads task records with the attributes of ``the dashboard's task table (``TaskRecord``)``
(task_id, name, state, job_id, node_id, pid, t_pending, t_scheduled, t_start, t_args,
t_executed, t_end); ``TimelineStore`` keeps what the task table does not (parents, argument
producers, profile spans, transfers), each bounded, and the trace's metadata says how much
was dropped. Flow arrows to a producer need its location: a bounded map of the most recent
``FLOW_WINDOW`` tasks, so an arrow whose producer is older than that is counted, not drawn.
"""

from __future__ import annotations

import json
import os
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Any

from ember.trace.store import FLOW_WINDOW, Filters, TimelineStore

# The categories are Ray's, so tools that filter Ray traces by ``cat`` work on these: a
# task's slice is ``task::<its name>``; each phase's category is its name; the anchor of an
# arrow from a driver is ``submit_task``.
TASK_CAT_PREFIX = "task::"
SUBMIT_CAT = "submit_task"
# (name and category, start attribute, end attribute, colour) of the phases nested in a
# task's slice.
PHASES = (
    ("task:deserialize_arguments", "t_start", "t_args", "rail_load"),
    ("task:execute", "t_args", "t_executed", "rail_animation"),
    ("task:store_outputs", "t_executed", "t_end", "rail_idle"),
)
PHASE_CATS = frozenset(p[0] for p in PHASES)


def is_task_slice(event: dict[str, Any]) -> bool:
    """Whether a trace event is a task's own slice (not a phase, span or anchor)."""
    return event.get("ph") == "X" and str(event.get("cat", "")).startswith(TASK_CAT_PREFIX)


class _Locations:
    """Where recent tasks ran, for arrows to them: (process, thread, start, end), bounded."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.map: OrderedDict[str, tuple[int, int, float, float]] = OrderedDict()

    def put(self, task_id: str, where: tuple[int, int, float, float]) -> None:
        self.map[task_id] = where
        if len(self.map) > self.cap:
            self.map.popitem(last=False)

    def get(self, task_id: str) -> tuple[int, int, float, float] | None:
        return self.map.get(task_id)


class TraceWriter:
    """Chrome's JSON array format, one event per line, written as it goes."""

    def __init__(self, node_labels: dict[str, str] | None = None) -> None:
        self.node_labels = node_labels or {}
        self._pids: dict[str, int] = {}  # node id -> the trace's process number
        self._threads: set[tuple[int, int]] = set()
        self._names: dict[str, str] = {}  # json-encoded names, cached (few distinct)
        self._flow_id = 0
        self.async_id = 0  # ids of the wait-for-resources pairs
        self.counts = {
            "tasks": 0,
            "spans": 0,
            "flows": 0,
            "flows_unresolved": 0,
            "transfers": 0,
            "marks": 0,
        }
        self._first = True
        # Times are whole microseconds since the epoch, as in Ray's traces. Integers (below
        # 2**53, so exact in a viewer's doubles) keep a phase ending with its task from
        # ending after it. ``origin`` stays in the metadata for readers of older traces.
        self.origin = 0.0

    def us(self, t: float) -> int:
        return round(t * 1e6)

    def _q(self, s: str) -> str:
        enc = self._names.get(s)
        if enc is None:
            enc = json.dumps(s)
            if len(self._names) < 100_000:
                self._names[s] = enc
        return enc

    def _line(self, text: str) -> str:
        if self._first:
            self._first = False
            return "[\n" + text
        return ",\n" + text

    def finish(self, metadata: dict[str, Any]) -> str:
        meta = json.dumps(
            {
                "name": "ember_trace_info",
                "ph": "M",
                "cat": "__metadata",
                "pid": 0,
                "tid": 0,
                "args": metadata,
            }
        )
        return self._line(meta) + "\n]\n"

    def process(self, node_id: str) -> tuple[int, str]:
        """The trace's process number for a node, and its metadata lines the first time."""
        pid = self._pids.get(node_id)
        if pid is not None:
            return pid, ""
        pid = self._pids[node_id] = len(self._pids) + 1
        label = self.node_labels.get(node_id) or f"node {node_id[:12]}"
        text = self._line(
            f'{{"name":"process_name","ph":"M","cat":"__metadata","pid":{pid},"tid":0,'
            f'"args":{{"name":{self._q(label)}}}}}'
        ) + self._line(
            f'{{"name":"process_sort_index","ph":"M","cat":"__metadata","pid":{pid},"tid":0,'
            f'"args":{{"sort_index":{pid}}}}}'
        )
        return pid, text

    def thread(self, pid: int, tid: int, label: str) -> str:
        if (pid, tid) in self._threads:
            return ""
        if len(self._threads) < 1_000_000:
            self._threads.add((pid, tid))
        return self._line(
            f'{{"name":"thread_name","ph":"M","cat":"__metadata","pid":{pid},"tid":{tid},'
            f'"args":{{"name":{self._q(label)}}}}}'
        )

    def slice(
        self,
        pid: int,
        tid: int,
        name: str,
        cat: str,
        start: float,
        end: float,
        args: str = "{}",
        cname: str | None = None,
    ) -> str:
        colour = f',"cname":{self._q(cname)}' if cname else ""
        extra = f',"args":{args}' if args != "{}" else ""
        ts = self.us(start)
        dur = max(self.us(end) - ts, 1 if cat == SUBMIT_CAT else 0)
        return self._line(
            f'{{"ph":"X","name":{self._q(name)},"cat":{self._q(cat)},"pid":{pid},"tid":{tid},'
            f'"ts":{ts},"dur":{dur}{colour}{extra}}}'
        )

    def instant(self, pid: int, name: str, cat: str, t: float, args: dict[str, Any]) -> str:
        """A process-wide instant event (Chrome's ``ph: "i"``, scope ``p``)."""
        return self._line(
            f'{{"ph":"i","s":"p","name":{self._q(name)},"cat":{self._q(cat)},"pid":{pid},'
            f'"tid":0,"ts":{self.us(t)},"args":{json.dumps(args)}}}'
        )

    def async_slice(
        self, pid: int, name: str, cat: str, ident: str, start: float, end: float
    ) -> str:
        head = f'"name":{self._q(name)},"cat":{self._q(cat)},"id":"{ident}","pid":{pid},"tid":0'
        return self._line(f'{{"ph":"b",{head},"ts":{self.us(start)}}}') + self._line(
            f'{{"ph":"e",{head},"ts":{self.us(max(end, start))}}}'
        )

    def flow(self, name: str, src: tuple[int, int, float], dst: tuple[int, int, float]) -> str:
        self._flow_id += 1
        self.counts["flows"] += 1
        fid = self._flow_id
        q = self._q(name)
        return self._line(
            f'{{"ph":"s","name":{q},"cat":"flow","id":{fid},"pid":{src[0]},"tid":{src[1]},'
            f'"ts":{self.us(src[2])}}}'
        ) + self._line(
            f'{{"ph":"f","bp":"e","name":{q},"cat":"flow","id":{fid},"pid":{dst[0]},'
            f'"tid":{dst[1]},"ts":{self.us(dst[2])}}}'
        )


LANE_STRIDE = 1 << 22  # above any Linux pid: a lane's thread id is pid + lane * stride
MAX_LANES = 64
LANE_MEMORY = 32  # intervals remembered per lane to test overlaps


class _Lanes:
    """Tasks that overlap on one worker (a threaded or async actor) go to extra thread rows
    ("lanes"), since a viewer nests slices of one thread and overlapping ones would not nest.
    Each lane remembers its last few intervals only (records may come out of order), so the
    memory is bounded by workers x lanes, not by tasks."""

    def __init__(self) -> None:
        self.lanes: dict[tuple[int, int], list[deque[tuple[int, int]]]] = {}
        # Per worker, per lane: the interval with the latest end it was given. A task starting
        # at or after that end overlaps nothing remembered, and one that overlaps that interval
        # cannot go there: in the common case (tasks in order) a lane costs one or two
        # comparisons, not a pass over its intervals.
        self.latest: dict[tuple[int, int], list[tuple[int, int]]] = {}

    def place(self, pid: int, tid: int, start: int, end: int) -> int:
        key = (pid, tid)
        lanes = self.lanes.get(key)
        if lanes is None:
            lanes = self.lanes[key] = []
            self.latest[key] = []
        latest = self.latest[key]
        for i, lane in enumerate(lanes):
            a, b = latest[i]
            if start >= b or (end <= a and all(end <= x or start >= y for x, y in lane)):
                lane.append((start, end))
                if end > b:
                    latest[i] = (start, end)
                return i
        if len(lanes) < MAX_LANES:
            lanes.append(deque([(start, end)], maxlen=LANE_MEMORY))
            latest.append((start, end))
            return len(lanes) - 1
        lanes[-1].append((start, end))  # past the cap: overlaps are drawn as they are
        if end > latest[-1][1]:
            latest[-1] = (start, end)
        return len(lanes) - 1


def generate(
    tasks: Iterable[Any],
    store: TimelineStore | None = None,
    filters: Filters | None = None,
    node_labels: dict[str, str] | None = None,
    driver_pids: Iterable[int] = (),
    table_losses: Callable[[], dict[str, int]] | None = None,
    info: dict[str, Any] | None = None,
) -> Iterator[str]:
    """The trace as text chunks: tasks in submission order (a producer and a parent come
    before the tasks that use them), then profile spans and transfers. ``tasks`` may be any
    iterable of task records: nothing but a bounded window of locations is kept.
    ``table_losses``, asked once at the end, gives the tasks the source lost (the task
    table's evictions past its cap) for the metadata's ``dropped``; ``info`` goes into the
    metadata as it is."""
    filters = filters or Filters()
    store = store or TimelineStore()
    writer = TraceWriter(node_labels)
    drivers = set(driver_pids)
    recent = _Locations(FLOW_WINDOW)
    lanes = _Lanes()
    flows = store.flows
    chunk: list[str] = []

    def thread_label(pid: int) -> str:
        return f"driver:{pid}" if pid in drivers else f"worker:{pid}"

    for rec in tasks:
        start, end = rec.t_start, rec.t_end
        if start is None or end is None:
            continue  # not run yet (or still running): nothing to draw
        node_id = rec.node_id or ""
        if not filters.keeps(rec.job_id, node_id, start, end):
            continue
        pid, meta = writer.process(node_id)
        worker_pid = int(rec.pid or 0)
        lane = lanes.place(pid, worker_pid, writer.us(start), writer.us(end))
        tid = worker_pid + lane * LANE_STRIDE
        if meta:
            chunk.append(meta)
        label = thread_label(worker_pid) + (f" (concurrent {lane})" if lane else "")
        chunk.append(writer.thread(pid, tid, label))
        failed = rec.state == "FAILED"
        # Bytes per task matter (a million tasks; the browser page parses each window): the
        # attempt only when it is a retry, no colour unless failed (viewers colour by name).
        attempt = int(rec.attempt or 0)
        args = (
            f'{{"task_id":"{rec.task_id}","state":"{rec.state}","job_id":"{rec.job_id or ""}"'
            + (f',"attempt":{attempt}}}' if attempt else "}")
        )
        chunk.append(
            writer.slice(
                pid,
                tid,
                rec.name or "task",
                TASK_CAT_PREFIX + (rec.name or "task"),
                start,
                end,
                args,
                "terrible" if failed else None,
            )
        )
        for name, a, b, colour in PHASES:
            ta, tb = getattr(rec, a), getattr(rec, b)
            if ta is not None and tb is not None:
                ta, tb = max(ta, start), min(tb, end)  # inside the task's slice, always
                chunk.append(writer.slice(pid, tid, name, name, ta, tb, "{}", colour))
        if rec.t_pending is not None and filters.waits:
            ready = rec.t_scheduled if rec.t_scheduled is not None else start
            # A short id: pairs only need one unique within the trace (the slice names the task).
            writer.async_id += 1
            chunk.append(
                writer.async_slice(
                    pid,
                    "task:wait_for_resources",
                    "scheduling",
                    f"w{writer.async_id:x}",
                    rec.t_pending,
                    ready,
                )
            )
        writer.counts["tasks"] += 1
        recent.put(rec.task_id, (pid, tid, start, end))
        flow = flows.get(rec.task_id)
        if flow is not None:
            parent, owner_node, owner_pid, producers = flow
            submitted = rec.t_pending if rec.t_pending is not None else start
            if owner_pid:
                opid, meta = writer.process(owner_node)
                if meta:
                    chunk.append(meta)
                chunk.append(writer.thread(opid, int(owner_pid), thread_label(int(owner_pid))))
                if int(owner_pid) in drivers:
                    # A driver's thread has no task slice for the arrow to leave from (a
                    # viewer drops such an arrow): a microsecond "submit" slice anchors it.
                    chunk.append(
                        writer.slice(
                            opid, int(owner_pid), SUBMIT_CAT, SUBMIT_CAT, submitted, submitted
                        )
                    )
                chunk.append(
                    writer.flow("submitted", (opid, int(owner_pid), submitted), (pid, tid, start))
                )
            for producer in producers:
                where = recent.get(producer)
                if where is None:
                    writer.counts["flows_unresolved"] += 1
                    continue
                # The arrow leaves the producer just before its end, inside its slice.
                src_t = max(where[3] - 1e-6, where[2])
                chunk.append(writer.flow("object", (where[0], where[1], src_t), (pid, tid, start)))
        if len(chunk) >= 2048:
            yield "".join(chunk)
            chunk.clear()

    for span in list(store.spans):
        if not filters.keeps(span["job_id"], span["node_id"], span["start"], span["end"]):
            continue
        pid, meta = writer.process(span["node_id"])
        if meta:
            chunk.append(meta)
        tid = int(span["pid"] or 0)
        chunk.append(writer.thread(pid, tid, thread_label(tid)))
        chunk.append(
            writer.slice(
                pid,
                tid,
                span["name"],
                span["cat"],
                span["start"],
                span["end"],
                json.dumps(span["args"]),
                span.get("cname"),
            )
        )
        writer.counts["spans"] += 1
        if len(chunk) >= 2048:
            yield "".join(chunk)
            chunk.clear()

    for tr in list(store.transfers):
        if filters.node_id and filters.node_id not in (tr.get("from_node"), tr.get("to_node")):
            continue
        if not filters.keeps(None, None, tr["start"], tr["end"]):
            continue
        pid, meta = writer.process(tr["to_node"])
        if meta:
            chunk.append(meta)
        # Async slices: pulls overlap, and each gets its own track in the node's process.
        size = tr.get("size") or 0
        label = f"object transfer {size / 2**20:.1f} MiB from {str(tr.get('from_node'))[:8]}"
        chunk.append(
            writer.async_slice(
                pid, label, "transfer", str(tr.get("object_id")), tr["start"], tr["end"]
            )
        )
        writer.counts["transfers"] += 1

    for mark in list(store.marks):
        if (
            filters.node_id
            or filters.job_id
            or not filters.keeps(None, None, mark["time"], mark["time"])
        ):
            continue  # a cluster's mark is of no node and no job
        pid, meta = writer.process(mark["row"])
        if meta:
            chunk.append(meta)
        chunk.append(writer.thread(pid, 0, mark["cat"]))
        chunk.append(writer.instant(pid, mark["name"], mark["cat"], mark["time"], mark["args"]))
        writer.counts["marks"] += 1

    meta = {
        **writer.counts,
        "ts_origin_unix_seconds": writer.origin,
        "dropped": {**store.dropped, **(table_losses() if table_losses else {})},
        "flow_window": FLOW_WINDOW,
        "filters": {k: v for k, v in vars(filters).items() if v is not None},
        **(info or {}),
    }
    chunk.append(writer.finish(meta))  # an empty trace is still a valid array
    yield "".join(chunk)


def write(out: IO[str], tasks: Iterable[Any], **kwargs: Any) -> None:
    """Streams the trace into ``out`` chunk by chunk (see ``generate``)."""
    for text in generate(tasks, **kwargs):
        out.write(text)


def loss_warnings(info: dict) -> list[str]:
    """What the trace lacks because the dashboard's bounded stores let it go, from its
    metadata (``ember_trace_info``): one line per kind, saying how to keep more."""
    dropped = {k: v for k, v in (info.get("dropped") or {}).items() if v}
    lines = []
    evicted = dropped.pop("tasks", 0)
    if evicted:
        cap = info.get("max_tasks")
        kept = f"the newest {cap:,}" if isinstance(cap, int) else "a bounded number of"
        lines.append(
            f"Warning: the dashboard keeps {kept} tasks (max_tasks); {evicted:,} older tasks "
            "were evicted and are not in this trace. Set EMBER_DASHBOARD_MAX_TASKS on the head "
            "to keep more."
        )
    during = dropped.pop("tasks_during_export", 0)
    if during:
        lines.append(
            f"Warning: {during:,} tasks were evicted while the trace was written (the cluster "
            "runs tasks faster than the export reads them); they are not in this trace."
        )
    if dropped:
        lines.append(f"Warning: the dashboard's bounded buffers dropped older entries: {dropped}")
    return lines


def trace_info(path: str) -> dict:
    """The trace's last event carries its counts (``ember_trace_info``)."""
    with open(path, "rb") as f:
        f.seek(max(os.path.getsize(path) - 8192, 0))
        tail = f.read().decode("utf-8", "replace")
    for line in reversed(tail.splitlines()):
        if "ember_trace_info" in line:
            try:
                return json.loads(line.lstrip(",").strip())["args"]
            except (ValueError, KeyError):
                break
    return {}
