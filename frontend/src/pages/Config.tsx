// The autoscaler's view (Ray's "Ray Config" tab): the cluster config with its secrets masked,
// each node type with min / current / max, the launches under way, idle nodes with the time
// left before the idle timeout removes them, the demand the autoscaler scales for, the
// cluster's size over time, and its recent decisions with their reasons and failures with
// their errors. Everything comes from GET api/autoscaler/status, the autoscaler's status record
// as the dashboard last read it from the GCS (a cluster started by hand has none).
import { useEffect, useMemo, useState } from "preact/hooks";
import { Chart } from "../components/Chart";
import { ErrorBox, StateBadge, Stat } from "../components/bits";
import { GroupLink, NodeLink } from "../components/links";
import { useApi } from "../lib/data";
import { duration, resources, time } from "../lib/format";
import { useVersion } from "../lib/session";

type Shape = Record<string, number>;
interface Instance {
  instance_id: string;
  node_type: string;
  state: string;
  node_id: string | null;
  ip: string | null;
  since: number;
  idle_since: number | null;
  error: string | null;
  note?: string | null;
}
interface Decision {
  time: number;
  action: string;
  node_type: string;
  instance_id: string | null;
  count: number;
  reason: string;
}
interface NodeTypeView {
  name: string;
  is_head: boolean;
  min_workers: number;
  max_workers: number;
  current: number;
  pending: number;
  failed: number;
  idle: number;
  resources: Shape;
  backoff_until: number | null;
  backoff_failures: number;
}
interface Failure {
  time: number;
  node_type: string;
  instance_id: string | null;
  error: string;
}
interface StatusRecord {
  time: number;
  cluster_name: string;
  monitor_pid: number;
  config: unknown;
  instances: Instance[];
  demand: {
    leases?: { shape: Shape; count: number }[];
    actors?: { shape: Shape; count: number }[];
    placement_groups?: { id: string; strategy: string; bundles: Shape[] }[];
    request_resources?: Shape[];
  };
  infeasible: { shape: Shape; count: number; since: number }[];
  decisions: Decision[];
  counters: { started: number; stopped: number; failed_create: number };
  idle_timeout_s: number;
  upscaling_speed: number;
}
interface AutoscalerStatus {
  now: number;
  present: boolean;
  fresh: boolean;
  error: string | null;
  age_s?: number;
  stale_after_s: number;
  record: StatusRecord | null;
  node_types_view?: NodeTypeView[];
  pending_launches?: Instance[];
  failures?: Failure[];
  sizes: { time: number; total: number; pending: number; by_type: Record<string, number> }[];
}

/** Seconds on the dashboard's clock, moving with the page's own (frozen in history mode). */
function useServerNow(serverNow: number | undefined, frozen: boolean): number {
  const [at, setAt] = useState({ server: serverNow ?? 0, local: Date.now() });
  const [, tick] = useState(0);
  useEffect(() => setAt({ server: serverNow ?? 0, local: Date.now() }), [serverNow]);
  useEffect(() => {
    if (frozen) return;
    const t = setInterval(() => tick((x) => x + 1), 1000);
    return () => clearInterval(t);
  }, [frozen]);
  return frozen ? at.server : at.server + (Date.now() - at.local) / 1000;
}

function Demands({ rec }: { rec: StatusRecord }) {
  const d = rec.demand ?? {};
  const rows: [string, string, string | preact.JSX.Element][] = [];
  for (const l of d.leases ?? []) rows.push(["tasks", resources(l.shape), `${l.count} pending`]);
  for (const a of d.actors ?? []) rows.push(["actors", resources(a.shape), `${a.count} pending`]);
  for (const g of d.placement_groups ?? [])
    rows.push([
      `placement group (${g.strategy})`,
      g.bundles.map((b) => `{${resources(b)}}`).join(", "),
      <GroupLink id={g.id} />,
    ]);
  for (const r of d.request_resources ?? []) rows.push(["request_resources()", resources(r), "a floor on the cluster's size"]);
  for (const i of rec.infeasible ?? []) rows.push(["infeasible: no node type can hold it", resources(i.shape), `${i.count} waiting since ${time(i.since)}`]);
  if (!rows.length) return <div class="note" data-testid="demands-none">No pending demand: nothing waits for a node.</div>;
  return (
    <table class="table" data-testid="demands-table">
      <thead>
        <tr>
          <th>From</th>
          <th>Shape</th>
          <th>How many</th>
        </tr>
      </thead>
      <tbody>
        {rows.map(([from, shape, n], i) => (
          <tr key={i}>
            <td>{from}</td>
            <td class="mono">{shape}</td>
            <td>{n}</td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

export function Config(_: { params: URLSearchParams }) {
  const version = useVersion();
  const recorded = !!version?.history;
  const st = useApi<AutoscalerStatus>("api/autoscaler/status", {}, { liveTypes: ["event"], pollMs: recorded ? undefined : 2000 });
  const s = st.data;
  const rec = s?.record ?? null;
  const now = useServerNow(s?.now, recorded);
  const sizes = useMemo(() => {
    const pts = s?.sizes ?? [];
    return [pts.map((p) => p.time), pts.map((p) => p.total), pts.map((p) => p.pending)];
  }, [s?.sizes]);
  const decisions = useMemo(() => [...(rec?.decisions ?? [])].sort((a, b) => b.time - a.time), [rec?.decisions]);

  if (st.error) return <ErrorBox error={st.error} />;
  if (!s) return <div class="note">Loading…</div>;
  if (!s.present || !rec)
    return (
      <div>
        <h1>Config</h1>
        <ErrorBox error={s.error ?? undefined} />
        <div class="note" data-testid="autoscaler-absent">
          No autoscaler runs on this cluster: it was started by hand (ember start), so its size is what was started. Start one with `ember up
          CLUSTER.yaml`, or in tests with ember.cluster_utils.AutoscalingCluster.
        </div>
      </div>
    );
  const types = s.node_types_view ?? [];
  const idleTimeout = rec.idle_timeout_s;
  return (
    <div>
      <h1>
        Config <span class="note">cluster {rec.cluster_name}</span>
      </h1>
      <ErrorBox error={s.error ?? undefined} />
      {!s.fresh && (
        <div class="error" role="alert" data-testid="autoscaler-stale">
          The autoscaler's last status is {duration(s.age_s)} old (its monitor, pid {rec.monitor_pid}, writes one every tick): it is not running.
          What follows is what it said last.
        </div>
      )}
      <div class="cards" data-testid="autoscaler-stats">
        <Stat label="Nodes running" value={types.reduce((n, t) => n + t.current, 0)} sub={`${(s.pending_launches ?? []).length} launching`} testId="stat-nodes-running" />
        <Stat label="Started / stopped" value={`${rec.counters?.started ?? 0} / ${rec.counters?.stopped ?? 0}`} sub={`${rec.counters?.failed_create ?? 0} failed to launch`} testId="stat-started" />
        <Stat label="Idle timeout" value={duration(idleTimeout)} sub={`upscaling speed ${rec.upscaling_speed}`} testId="stat-idle-timeout" />
        <Stat label="Monitor" value={`pid ${rec.monitor_pid}`} sub={`status ${duration(Math.max(0, now - rec.time))} old`} testId="stat-monitor" />
      </div>

      <h2>Node types</h2>
      <table class="table" data-testid="node-types-table">
        <thead>
          <tr>
            <th>Type</th>
            <th>Resources</th>
            <th>Min</th>
            <th>Current</th>
            <th>Max</th>
            <th>Launching</th>
            <th>Idle</th>
            <th>Failed (10 min)</th>
            <th>Launches</th>
          </tr>
        </thead>
        <tbody>
          {types.map((t) => (
            <tr key={t.name} data-node-type={t.name}>
              <td>
                {t.name}
                {t.is_head ? <span class="note"> (head)</span> : null}
              </td>
              <td class="mono">{resources(t.resources)}</td>
              <td data-testid="type-min">{t.min_workers}</td>
              <td data-testid="type-current">{t.current}</td>
              <td data-testid="type-max">{t.max_workers}</td>
              <td data-testid="type-pending">{t.pending}</td>
              <td>{t.idle}</td>
              <td>{t.failed}</td>
              <td data-testid="type-backoff">
                {t.backoff_until && t.backoff_until > now
                  ? `backing off ${duration(t.backoff_until - now)} more, after ${t.backoff_failures} failure${t.backoff_failures === 1 ? "" : "s"}`
                  : "–"}
              </td>
            </tr>
          ))}
        </tbody>
      </table>

      <h2>Cluster size</h2>
      <div class="charts">
        <Chart
          title="Nodes"
          series={[
            { label: "running", color: "#2e86de", fmt: (v) => v.toFixed(0), step: true },
            { label: "launching", color: "#f1c40f", fmt: (v) => v.toFixed(0), step: true },
          ]}
          data={sizes}
          testId="chart-cluster-size"
        />
      </div>

      <h2>Nodes</h2>
      <table class="table" data-testid="instances-table">
        <thead>
          <tr>
            <th>Instance</th>
            <th>Type</th>
            <th>State</th>
            <th>Node</th>
            <th>IP</th>
            <th>Since</th>
            <th>Idle</th>
            <th>Error / note</th>
          </tr>
        </thead>
        <tbody>
          {rec.instances.map((i) => {
            const idle = i.state === "running" && i.idle_since ? Math.max(0, now - i.idle_since) : null;
            return (
              <tr key={i.instance_id} data-instance={i.instance_id}>
                <td class="mono">{i.instance_id}</td>
                <td>{i.node_type}</td>
                <td>
                  <StateBadge state={i.state} />
                </td>
                <td>
                  <NodeLink id={i.node_id} />
                </td>
                <td class="mono">{i.ip ?? "–"}</td>
                <td>{time(i.since)}</td>
                <td data-testid="idle-timer">
                  {idle === null ? "–" : `idle ${duration(idle)}, removed in ${duration(Math.max(0, idleTimeout - idle))}`}
                </td>
                <td>{i.error ?? i.note ?? ""}</td>
              </tr>
            );
          })}
        </tbody>
      </table>

      <h2>Demand</h2>
      <Demands rec={rec} />

      <h2>Recent decisions</h2>
      <table class="table" data-testid="decisions-table">
        <thead>
          <tr>
            <th style={{ width: "100px" }}>Time</th>
            <th style={{ width: "90px" }}>Action</th>
            <th>Type</th>
            <th>Count</th>
            <th>Instance</th>
            <th>Reason</th>
          </tr>
        </thead>
        <tbody>
          {decisions.map((d, i) => (
            <tr key={i} data-action={d.action}>
              <td>{time(d.time)}</td>
              <td>{d.action}</td>
              <td>{d.node_type}</td>
              <td>{d.count}</td>
              <td class="mono">{d.instance_id ?? "–"}</td>
              <td data-testid="decision-reason">{d.reason}</td>
            </tr>
          ))}
        </tbody>
      </table>
      {!decisions.length && <div class="note">No scaling decision yet.</div>}

      <h2>Launch failures</h2>
      {(s.failures ?? []).length ? (
        <table class="table" data-testid="failures-table">
          <thead>
            <tr>
              <th style={{ width: "100px" }}>Time</th>
              <th>Type</th>
              <th>Instance</th>
              <th>Error</th>
            </tr>
          </thead>
          <tbody>
            {(s.failures ?? []).map((f, i) => (
              <tr key={i}>
                <td>{time(f.time)}</td>
                <td>{f.node_type}</td>
                <td class="mono">{f.instance_id ?? "–"}</td>
                <td style={{ color: "var(--bad-fg)" }}>{f.error}</td>
              </tr>
            ))}
          </tbody>
        </table>
      ) : (
        <div class="note" data-testid="failures-none">
          No launch failed in the last 10 minutes.
        </div>
      )}

      <h2>Cluster config</h2>
      <div class="note">As the autoscaler read it, defaults filled; secrets (keys, passwords, tokens) are shown as ***.</div>
      <pre class="wrap" data-testid="cluster-config">
        {JSON.stringify(rec.config, null, 2)}
      </pre>
    </div>
  );
}
