// Keeps the live timeline's events across incremental fetches, so following the task stream
// downloads only what ended since the last fetch instead of the whole window again.
//
// Each /api/timeline response numbers its processes (nodes) in order of appearance and counts
// time from its own origin; events are normalised here to the node's label and absolute
// microseconds, so responses merge. An event seen twice (the fetches overlap) is kept once.
import type { TraceEvent } from "./trace";

export class TraceAccumulator {
  private byKey = new Map<string, TraceEvent>();
  private meta = new Map<string, TraceEvent>();
  private seq = 0;
  /** Latest slice end seen (absolute µs): the next fetch asks from a little before it. */
  latestEnd = 0;
  version = 0;

  reset(): void {
    this.byKey.clear();
    this.meta.clear();
    this.latestEnd = 0;
    this.version++;
  }

  add(raw: unknown): void {
    const events: TraceEvent[] = Array.isArray(raw) ? raw : ((raw as { traceEvents?: TraceEvent[] })?.traceEvents ?? []);
    const label = new Map<string, string>();
    let origin = 0;
    for (const e of events) {
      if (e.ph !== "M") continue;
      if (e.name === "process_name") label.set(String(e.pid), String(e.args?.name ?? e.pid));
      else if (e.name === "ember_trace_info" && typeof e.args?.ts_origin_unix_seconds === "number") origin = e.args.ts_origin_unix_seconds * 1e6;
    }
    const seq = ++this.seq;
    for (const e of events) {
      const pid = label.get(String(e.pid)) ?? String(e.pid);
      if (e.ph === "M") {
        if (e.name === "ember_trace_info") continue;
        const m = { ...e, pid };
        this.meta.set(`${e.name}|${pid}|${e.tid}`, m);
        continue;
      }
      const ts = (e.ts ?? 0) + origin;
      // Flow ids are per response: make them unique across responses.
      const id = e.ph === "s" || e.ph === "f" || e.ph === "t" ? `${seq}:${e.id}` : e.id;
      const n = { ...e, pid, ts, id };
      // A task's slice is keyed by its id: a running task is drawn up to "now" in each
      // response, and its latest slice (running longer, or ended) replaces the earlier one,
      // so a task that finished is not left drawn as RUNNING beside its final slice.
      const taskId = e.ph === "X" && e.cat?.startsWith("task::") ? e.args?.task_id : undefined;
      const key = taskId
        ? `task|${String(taskId)}`
        : e.ph === "s" || e.ph === "f" || e.ph === "t"
          ? `${e.ph}|${e.name}|${pid}|${e.tid}|${ts}`
          : `${e.ph}|${e.name}|${pid}|${e.tid}|${ts}|${e.dur ?? ""}`;
      if (!taskId && this.byKey.has(key)) continue;
      this.byKey.set(key, n);
      if (e.ph === "X") this.latestEnd = Math.max(this.latestEnd, ts + (e.dur ?? 0));
    }
    this.version++;
  }

  /** Forgets slices that ended before `t0` (µs): the window moved past them. */
  prune(t0: number): void {
    for (const [k, e] of this.byKey) if ((e.ts ?? 0) + (e.dur ?? 0) < t0) this.byKey.delete(k);
    this.version++;
  }

  /** The merged trace (metadata first), in Chrome's array form with absolute times. */
  events(): TraceEvent[] {
    return [...this.meta.values(), ...this.byKey.values()];
  }

  get size(): number {
    return this.byKey.size;
  }
}
