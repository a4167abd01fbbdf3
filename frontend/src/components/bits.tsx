// Small pieces every page uses.
import type { ComponentChildren } from "preact";
import { useEffect, useRef, useState } from "preact/hooks";
import type { Page } from "../lib/api";
import { useApi } from "../lib/data";
import { shortId } from "../lib/format";
import type { NodeRow, WorkerRow } from "../lib/types";

export function StateBadge({ state }: { state: string | null | undefined }) {
  return <span class={`state state-${state ?? ""}`}>{state ?? "–"}</span>;
}

export function Stat(p: { label: string; value: ComponentChildren; sub?: ComponentChildren; testId?: string }) {
  return (
    <div class="card stat" data-testid={p.testId}>
      <div class="label">{p.label}</div>
      <div class="value">{p.value}</div>
      {p.sub !== undefined && <div class="sub">{p.sub}</div>}
    </div>
  );
}

export function Modal(p: { title: string; children: ComponentChildren; onClose: () => void }) {
  return (
    <div class="modal-bg" onClick={(e) => e.target === e.currentTarget && p.onClose()}>
      <div class="modal" role="dialog" aria-label={p.title}>
        <h2>{p.title}</h2>
        {p.children}
      </div>
    </div>
  );
}

export function ErrorBox({ error }: { error?: string }) {
  return error ? (
    <div class="error" role="alert">
      {error}
    </div>
  ) : null;
}

/** A Dask-style progress bar: finished / running / pending / failed as shares of the total. */
export function ProgressBar({ parts, total }: { parts: { finished: number; running: number; pending: number; failed: number }; total: number }) {
  const w = (n: number) => `${total ? (100 * n) / total : 0}%`;
  return (
    <div class="bar" title={`finished ${parts.finished} · running ${parts.running} · pending ${parts.pending} · failed ${parts.failed}`}>
      <span class="finished" style={{ width: w(parts.finished) }} />
      <span class="running" style={{ width: w(parts.running) }} />
      <span class="pending" style={{ width: w(parts.pending) }} />
      <span class="failed" style={{ width: w(parts.failed) }} />
    </div>
  );
}

export function BarLegend() {
  return (
    <div class="legend">
      <span><i style={{ background: "#40c057" }} />finished</span>
      <span><i style={{ background: "#4dabf7" }} />running</span>
      <span><i style={{ background: "#fcc419" }} />pending</span>
      <span><i style={{ background: "#fa5252" }} />failed</span>
    </div>
  );
}

/** Task states grouped the way the pages count them. */
export function taskBuckets(byState: Record<string, number> | undefined) {
  const s = byState ?? {};
  const running = s.RUNNING ?? 0;
  const failed = s.FAILED ?? 0;
  const finished = s.FINISHED ?? 0;
  const pending = (s.PENDING_ARGS_AVAIL ?? 0) + (s.PENDING_NODE_ASSIGNMENT ?? 0) + (s.SUBMITTED_TO_WORKER ?? 0) + (s.RETRYING ?? 0);
  return { running, failed, finished, pending };
}

/** A text box that updates the URL (and so the query) once typing pauses. */
export function SearchBox(p: { value: string; placeholder: string; onChange: (v: string) => void; testId?: string }) {
  const [text, setText] = useState(p.value);
  const timer = useRef(0);
  useEffect(() => setText(p.value), [p.value]);
  useEffect(() => () => clearTimeout(timer.current), []);
  return (
    <input
      type="search"
      value={text}
      placeholder={p.placeholder}
      data-testid={p.testId}
      onInput={(e) => {
        const v = (e.currentTarget as HTMLInputElement).value;
        setText(v);
        clearTimeout(timer.current);
        timer.current = window.setTimeout(() => p.onChange(v), 200);
      }}
    />
  );
}

/** A filter on one node (the live node list), or any; a node no longer listed stays shown. */
export function NodeSelect(p: { value: string; onChange: (v: string | undefined) => void; testId?: string; anyLabel?: string }) {
  const nodes = useApi<Page<NodeRow>>("api/nodes", { limit: 1000 }, { liveTypes: ["node"] });
  const items = nodes.data?.items ?? [];
  return (
    <label>
      Node
      <select value={p.value} onChange={(e) => p.onChange((e.currentTarget as HTMLSelectElement).value || undefined)} data-testid={p.testId}>
        <option value="">{p.anyLabel ?? "any"}</option>
        {items.map((n) => (
          <option key={n.node_id} value={n.node_id}>
            {n.hostname ?? ""} {shortId(n.node_id, 12)}
          </option>
        ))}
        {p.value && !items.some((n) => n.node_id === p.value) && <option value={p.value}>{shortId(p.value, 12)}</option>}
      </select>
    </label>
  );
}

/** What a process is doing, in words: "running square", "actor Victim", "driver of job 01..". */
export function workerActivity(w: WorkerRow): string {
  if (w.kind === "driver") return w.job_id ? `driver of job ${w.job_id}` : "driver";
  if (w.current_task) return `running ${w.current_task}`;
  if (w.actor_class) return `actor ${w.actor_class}`;
  if (w.kind === "worker" && w.activity) return w.activity; // e.g. "leased, between tasks"
  return w.state && w.state !== "-" ? w.state.toLowerCase() : "–";
}

/** A process named for a picker: kind, pid and what it does ("worker pid 12 · actor Victim"). */
export function workerLabel(w: WorkerRow): string {
  const what = workerActivity(w);
  const kind = w.kind ?? w.component ?? "process";
  return what === "–" || what === kind ? `${kind} pid ${w.pid}` : `${kind} pid ${w.pid} · ${what}`;
}
