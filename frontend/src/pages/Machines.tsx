// One row per node, expanding to its workers; logs and errors of a node or a worker one click
// away. The expanded node is in the URL (?node=ID) so a link opens it.
import { Table, type Column } from "../components/VirtualTable";
import { ErrorBox, StateBadge, workerActivity } from "../components/bits";
import { JobLink, WorkerLink } from "../components/links";
import type { Page } from "../lib/api";
import { useApi, useNow } from "../lib/data";
import { bytes, duration, pct, shortId, time } from "../lib/format";
import { href, setParams } from "../lib/router";
import { useVersion } from "../lib/session";
import type { EventRow, NodeDetail, NodeRow, WorkerRow } from "../lib/types";

/** `{CPU: 4}` total and `{CPU: 3}` available -> "CPU: 1 / 4" (used / total). */
export function usedOfTotal(total: Record<string, number>, avail: Record<string, number>): string {
  const keys = Object.keys(total).filter((k) => !k.startsWith("node:") && !k.includes("_group_"));
  if (!keys.length) return "–";
  return keys
    .sort()
    .map((k) => {
      const t = total[k];
      const u = t - (avail[k] ?? 0);
      const fmt = (v: number) => (/memory/i.test(k) ? bytes(v) : String(+v.toFixed(2)));
      return `${k}: ${fmt(u)} / ${fmt(t)}`;
    })
    .join(", ");
}

type NodeWithMetrics = NodeRow & { metrics?: Record<string, any> };

function rootDisk(m: Record<string, any> | undefined): string {
  const disks = Array.isArray(m?.disks) ? (m!.disks as any[]) : [];
  const d = disks.find((x) => x.mount === "/") ?? disks[0];
  return d ? `${bytes(d.used_bytes)} / ${bytes(d.total_bytes)}` : "–";
}

/** The node's latest errors and events (worker crashes, failed tasks, agent restarts). */
function NodeErrors({ id }: { id: string }) {
  const ev = useApi<Page<EventRow>>("api/events", { filter: [`node_id=${id}`, "severity!=INFO"], limit: 10 }, { liveTypes: ["event"] });
  const rows = ev.data?.items ?? [];
  return (
    <div data-testid="node-errors">
      <h2>Errors and warnings on this node ({ev.data?.total ?? 0})</h2>
      <ErrorBox error={ev.error} />
      {rows.map((e, i) => (
        <div key={`${e.time}-${i}`} class="note">
          {time(e.time)} · {e.severity} · {e.pid ? `pid ${e.pid} · ` : ""}
          {e.message}
          {e.detail && (
            <details>
              <summary>traceback</summary>
              <pre>{e.detail}</pre>
            </details>
          )}
        </div>
      ))}
      {ev.data && rows.length === 0 && <div class="note">None.</div>}
    </div>
  );
}

const KIND_ORDER = ["driver", "worker"];

/** Drivers first, then workers, then the node's own processes (raylet, agent...), by pid. */
export function byKind(ws: WorkerRow[]): WorkerRow[] {
  const rank = (w: WorkerRow) => {
    const i = KIND_ORDER.indexOf(w.kind ?? "");
    return i < 0 ? KIND_ORDER.length : i;
  };
  return [...ws].sort((a, b) => rank(a) - rank(b) || a.pid - b.pid);
}

function NodeMetrics({ id }: { id: string }) {
  const d = useApi<NodeDetail>(`api/nodes/${encodeURIComponent(id)}`, {}, { liveTypes: ["node_metrics"], minGapMs: 2000 });
  if (d.error) return <ErrorBox error={d.error} />;
  if (!d.data) return <div class="note">Loading…</div>;
  const n = d.data;
  const m = n.metrics as Record<string, any>;
  const workerCols: Column<WorkerRow>[] = [
    { key: "pid", title: "PID", width: "80px", render: (w) => <WorkerLink node={n.node_id} pid={w.pid} /> },
    { key: "kind", title: "Kind", render: (w) => <span class={w.kind === "driver" ? "kind-driver" : ""}>{w.kind ?? "–"}</span> },
    {
      key: "state",
      title: "State / current task",
      render: (w) => workerActivity(w),
    },
    { key: "uptime", title: "Uptime", render: (w) => (w.start_time ? duration(Date.now() / 1000 - w.start_time) : "–") },
    { key: "cpu_percent", title: "CPU", align: "right", render: (w) => pct(w.cpu_percent) },
    { key: "rss_bytes", title: "RSS", align: "right", render: (w) => bytes(w.rss_bytes) },
    { key: "uss_bytes", title: "USS", align: "right", render: (w) => bytes(w.uss_bytes) },
    {
      key: "links",
      title: "",
      render: (w) => (
        <span>
          <a href={href("logs", { node: n.node_id, pid: String(w.pid) })}>logs</a>
          {" · "}
          <a href={href("tasks", { node: n.node_id, pid: String(w.pid), state: "FAILED" })}>errors</a>
          {" · "}
          <a href={href("actors", { pid: String(w.pid) })}>actors</a>
          {w.job_id ? (
            <>
              {" · job "}
              <JobLink id={w.job_id} />
            </>
          ) : null}
        </span>
      ),
    },
  ];
  return (
    <div data-testid={`node-detail-${n.node_id}`}>
      <div class="cards">
        <div class="card stat">
          <div class="label">CPU per core</div>
          <div class="sub">{Array.isArray(m.cpu_per_core) ? (m.cpu_per_core as number[]).map((c) => `${c.toFixed(0)}%`).join(" · ") : "–"}</div>
          <div class="sub">load {Array.isArray(m.load_avg) ? (m.load_avg as number[]).map((v) => v.toFixed(2)).join(" ") : "–"}</div>
        </div>
        <div class="card stat">
          <div class="label">Memory</div>
          <div class="sub">
            {bytes(m.mem_used_bytes)} used · {bytes(m.mem_available_bytes)} available · {bytes(m.mem_shared_bytes)} shared
          </div>
        </div>
        <div class="card stat">
          <div class="label">Disks</div>
          <div class="sub">
            {Array.isArray(m.disks) ? (m.disks as any[]).map((d) => `${d.mount} ${bytes(d.used_bytes)} / ${bytes(d.total_bytes)}`).join(" · ") : "–"}
          </div>
        </div>
        <div class="card stat">
          <div class="label">Object store</div>
          <div class="sub">
            {bytes(m.object_store_used_bytes)} / {bytes(m.object_store_capacity_bytes)} · {m.object_store_objects ?? "–"} objects
            {" · "}spilled {bytes(m.object_store_spilled_bytes ?? 0)}, {m.object_store_spilled_objects ?? 0} objects · restored {bytes(m.object_store_restored_bytes_total ?? 0)}
          </div>
        </div>
        {Array.isArray(m.gpus) &&
          (m.gpus as any[]).map((g) => (
            <div class="card stat" key={g.index}>
              <div class="label">GPU {g.index}: {g.name}</div>
              <div class="sub">
                {pct(g.utilization_percent)} · {bytes(g.memory_used_bytes)} / {bytes(g.memory_total_bytes)}
              </div>
            </div>
          ))}
      </div>
      <h2>
        Workers and components ({n.workers.length}) · <a href={href("logs", { node: n.node_id })}>node logs</a> ·{" "}
        <a href={href("tasks", { node: n.node_id, state: "FAILED" })}>failed tasks</a>
      </h2>
      <Table columns={workerCols} rows={byKind(n.workers)} rowKey={(w) => String(w.pid)} testId="workers-table" />
      <NodeErrors id={n.node_id} />
    </div>
  );
}

function storeText(m: Record<string, any> | undefined): string {
  if (!m || m.object_store_capacity_bytes === undefined) return "–";
  return `${bytes(m.object_store_used_bytes ?? 0)} / ${bytes(m.object_store_capacity_bytes)}`;
}

/** The object store: used / capacity, and what is spilled to disk now. */
function objectStore(m: Record<string, any> | undefined): preact.JSX.Element | string {
  const spilled = m?.object_store_spilled_bytes ?? 0;
  return (
    <span data-testid="node-store">
      {storeText(m)}
      {spilled > 0 && <div class="note">{`${bytes(spilled)} spilled`}</div>}
    </span>
  );
}

/** A dead node's figures are its last report's: shown greyed as "last: X", never as live. */
function lastKnown(n: NodeWithMetrics, value: string): preact.JSX.Element | string {
  return n.state === "ALIVE" ? value : <span class="stale" title="its last report before it died">last: {value}</span>;
}

export function Machines({ params }: { params: URLSearchParams }) {
  const open = params.get("node") ?? "";
  // /api/frontend/nodes: the node rows with their latest metrics sample, in one request.
  const nodes = useApi<Page<NodeWithMetrics>>("api/frontend/nodes", { limit: 1000 }, { liveTypes: ["node", "node_metrics"], minGapMs: 2000 });
  const anyDead = (nodes.data?.items ?? []).some((n) => n.state !== "ALIVE");
  const version = useVersion();
  // "Now" of a recorded session is when it ended: its uptimes and ages stop there.
  const ended = version?.history ? (version.stopped_at ?? undefined) : undefined;
  const ticking = useNow(anyDead && ended === undefined) / 1000; // "last seen N s ago" ticks
  const now = ended ?? ticking;
  const cols: Column<NodeWithMetrics>[] = [
    { key: "toggle", title: "", width: "24px", render: (n) => <span class="tree-toggle">{open === n.node_id ? "▾" : "▸"}</span> },
    {
      key: "host",
      title: "Host / IP",
      render: (n) => (
        <span>
          {n.hostname ?? "–"} <span class="note">{n.node_ip}</span> {n.is_head && <span class="note">(head)</span>}
          <div class="note mono">{shortId(n.node_id, 12)}</div>
        </span>
      ),
    },
    {
      key: "state",
      title: "State",
      render: (n) => (
        <span>
          <StateBadge state={n.state} />
          {n.state !== "ALIVE" && n.last_seen ? (
            <div class="note" data-testid="node-last-seen" title={new Date(n.last_seen * 1000).toLocaleString()}>
              last seen {duration(Math.max(0, now - n.last_seen))} ago
            </div>
          ) : null}
          {n.lost_reason && <div class="note">{n.lost_reason}</div>}
        </span>
      ),
    },
    // Cores are the machine's (the agent's psutil count), not the CPU resource it advertises.
    // Workers are worker processes only (the agent counts them; the node row counts every
    // process it lists, the raylet and agent too).
    { key: "workers", title: "Workers / cores", render: (n) => lastKnown(n, `${n.metrics?.num_workers ?? n.num_workers} / ${n.metrics?.num_cpus ?? "–"}`) },
    // A dead node's uptime ended when it was last seen.
    { key: "uptime", title: "Uptime", render: (n) => (n.start_time ? duration((n.state === "ALIVE" ? (ended ?? Date.now() / 1000) : n.last_seen) - n.start_time) : "–") },
    { key: "cpu", title: "CPU", align: "right", render: (n) => lastKnown(n, pct(n.cpu_percent)) },
    { key: "ram", title: "RAM", align: "right", render: (n) => lastKnown(n, `${bytes(n.mem_used_bytes)} / ${bytes(n.metrics?.mem_total_bytes)}`) },
    { key: "store", title: "Object store", align: "right", render: (n) => (n.state === "ALIVE" ? objectStore(n.metrics) : lastKnown(n, storeText(n.metrics))) },
    { key: "disk", title: "Disk", align: "right", render: (n) => lastKnown(n, rootDisk(n.metrics)) },
    {
      key: "net",
      title: "Sent / received",
      align: "right",
      // The rates, then the totals since the machine booted.
      render: (n) => (
        <span data-testid="node-net" title={`since boot: sent ${bytes(n.metrics?.net_sent_bytes)}, received ${bytes(n.metrics?.net_recv_bytes)}`}>
          {`${bytes(n.metrics?.net_sent_bytes_per_s)}/s · ${bytes(n.metrics?.net_recv_bytes_per_s)}/s`}
          <span class="note">{` (${bytes(n.metrics?.net_sent_bytes)} · ${bytes(n.metrics?.net_recv_bytes)})`}</span>
        </span>
      ),
    },
    { key: "resources", title: "Resources (used / total)", render: (n) => lastKnown(n, usedOfTotal(n.resources_total ?? {}, n.resources_available ?? {})) },
  ];
  return (
    <div>
      <h1>Machines</h1>
      <ErrorBox error={nodes.error} />
      <Table
        columns={cols}
        rows={nodes.data?.items ?? []}
        rowKey={(n) => n.node_id}
        rowClass={(n) => (n.state === "ALIVE" ? "" : "row-dead")}
        testId="nodes-table"
        onRowClick={(n) => setParams({ node: open === n.node_id ? undefined : n.node_id })}
        expanded={(n) => (open === n.node_id ? <NodeMetrics id={n.node_id} /> : null)}
      />
    </div>
  );
}
