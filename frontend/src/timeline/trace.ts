// Chrome trace (the JSON /api/timeline returns) -> rows and slices for the canvas.
// A process is a node, a thread a worker; "X" events are slices (phases nest inside a task's
// slice), "s"/"f" pairs are flow edges (a task to the tasks it submitted, producer to consumer).

export interface TraceEvent {
  ph: string;
  name?: string;
  cat?: string;
  ts?: number;
  dur?: number;
  pid?: number | string;
  tid?: number | string;
  id?: number | string;
  args?: Record<string, unknown>;
}

export interface Slice {
  row: number;
  depth: number;
  start: number; // µs
  end: number; // µs
  name: string;
  cat: string;
  args: Record<string, unknown>;
}

export interface Row {
  key: string;
  label: string;
  group: string;
  /** Slices sorted by start; `maxDur` lets a search by start find slices that began earlier. */
  slices: Slice[];
  maxDur: number;
  depth: number;
}

export interface Flow {
  id: string;
  from: { row: number; t: number };
  to: { row: number; t: number };
}

export interface Trace {
  rows: Row[];
  flows: Flow[];
  start: number;
  end: number;
  count: number;
}

export function parseTrace(raw: unknown): Trace {
  const events: TraceEvent[] = Array.isArray(raw) ? raw : ((raw as { traceEvents?: TraceEvent[] })?.traceEvents ?? []);
  const procName = new Map<string, string>();
  const threadName = new Map<string, string>();
  // Ember's traces count microseconds from an origin (kept small for the viewers' precision)
  // named in the ember_trace_info metadata; add it back to place slices in wall-clock time.
  let origin = 0;
  for (const e of events) {
    if (e.ph !== "M") continue;
    const n = String(e.args?.name ?? "");
    if (e.name === "process_name") procName.set(String(e.pid), n);
    else if (e.name === "thread_name") threadName.set(`${e.pid}/${e.tid}`, n);
    else if (e.name === "ember_trace_info" && typeof e.args?.ts_origin_unix_seconds === "number") origin = e.args.ts_origin_unix_seconds * 1e6;
  }
  const ts = (e: TraceEvent) => (e.ts ?? 0) + origin;
  const rowIndex = new Map<string, Row>();
  const rowOf = (e: TraceEvent): Row => {
    const key = `${e.pid}/${e.tid}`;
    let r = rowIndex.get(key);
    if (!r) {
      r = {
        key,
        group: procName.get(String(e.pid)) ?? `node ${e.pid}`,
        label: threadName.get(key) ?? `worker ${e.tid}`,
        slices: [],
        maxDur: 0,
        depth: 1,
      };
      rowIndex.set(key, r);
    }
    return r;
  };
  const open = new Map<string, TraceEvent[]>(); // B/E pairs per thread
  const flowStart = new Map<string, { key: string; t: number }>();
  const flowEnd: { id: string; key: string; t: number }[] = [];
  let start = Infinity;
  let end = -Infinity;
  let count = 0;
  const add = (e: TraceEvent, s: number, d: number) => {
    const r = rowOf(e);
    r.slices.push({ row: 0, depth: 0, start: s, end: s + d, name: e.name ?? "?", cat: e.cat ?? "", args: e.args ?? {} });
    start = Math.min(start, s);
    end = Math.max(end, s + d);
    count++;
  };
  for (const e of events) {
    switch (e.ph) {
      case "X":
        add(e, ts(e), Math.max(0, e.dur ?? 0));
        break;
      case "i": // an instant (the autoscaler's scaling decisions): a slice of no length
        add(e, ts(e), 0);
        break;
      case "B": {
        const k = `${e.pid}/${e.tid}`;
        if (!open.has(k)) open.set(k, []);
        open.get(k)!.push(e);
        break;
      }
      case "E": {
        const b = open.get(`${e.pid}/${e.tid}`)?.pop();
        if (b) add(b, ts(b), ts(e) - ts(b));
        break;
      }
      case "s":
        flowStart.set(String(e.id), { key: `${e.pid}/${e.tid}`, t: ts(e) });
        rowOf(e);
        break;
      case "f":
      case "t":
        flowEnd.push({ id: String(e.id), key: `${e.pid}/${e.tid}`, t: ts(e) });
        rowOf(e);
        break;
    }
  }
  // Rows grouped by node, workers in name order within it.
  const rows = [...rowIndex.values()].sort((a, b) => a.group.localeCompare(b.group) || a.label.localeCompare(b.label, undefined, { numeric: true }));
  const idx = new Map(rows.map((r, i) => [r.key, i]));
  rows.forEach((r, i) => {
    // Nesting: a slice inside the one before it goes one level deeper (a task's phases).
    r.slices.sort((a, b) => a.start - b.start || b.end - a.end);
    const stack: number[] = [];
    for (const s of r.slices) {
      while (stack.length && stack[stack.length - 1] <= s.start) stack.pop();
      s.depth = stack.length;
      s.row = i;
      stack.push(s.end);
      r.depth = Math.max(r.depth, s.depth + 1);
      r.maxDur = Math.max(r.maxDur, s.end - s.start);
    }
  });
  const flows: Flow[] = [];
  for (const f of flowEnd) {
    const s = flowStart.get(f.id);
    if (!s) continue;
    flows.push({ id: f.id, from: { row: idx.get(s.key)!, t: s.t }, to: { row: idx.get(f.key)!, t: f.t } });
  }
  if (!Number.isFinite(start)) start = end = 0;
  return { rows, flows, start, end, count };
}

/** Index of the first slice that may overlap [t, ...): slices start-sorted, none longer than maxDur. */
export function firstVisible(r: Row, t: number): number {
  let lo = 0;
  let hi = r.slices.length;
  const from = t - r.maxDur;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (r.slices[mid].start < from) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}
