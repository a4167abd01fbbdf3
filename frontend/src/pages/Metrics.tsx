// Metrics: every series of the dashboard's own history (30 minutes, no Prometheus needed),
// for the cluster and per node, live; links to Prometheus and Grafana when configured.
import { useMemo } from "preact/hooks";
import { Chart, type SeriesSpec } from "../components/Chart";
import { ErrorBox } from "../components/bits";
import { apiUrl, type Page } from "../lib/api";
import { useApi } from "../lib/data";
import { bytes, duration, shortId } from "../lib/format";
import { setParams } from "../lib/router";
import type { HistorySample, NodeRow, TaskRates, UserMetricHistory } from "../lib/types";
import { wholeBuckets } from "./Overview";

const PANELS: { title: string; keys: (keyof HistorySample)[]; labels: string[]; fmt: (v: number) => string; yMax?: number }[] = [
  { title: "CPU", keys: ["cpu_percent"], labels: ["CPU %"], fmt: (v) => `${v.toFixed(0)}%`, yMax: 100 },
  { title: "Memory", keys: ["mem_used_bytes", "mem_total_bytes"], labels: ["used", "total"], fmt: bytes },
  { title: "Object store", keys: ["object_store_used_bytes", "object_store_capacity_bytes", "object_store_spilled_bytes"], labels: ["used", "capacity", "spilled"], fmt: bytes },
  { title: "Disk I/O", keys: ["disk_read_bytes_per_s", "disk_write_bytes_per_s"], labels: ["read/s", "write/s"], fmt: bytes },
  { title: "Network", keys: ["net_sent_bytes_per_s", "net_recv_bytes_per_s"], labels: ["sent/s", "received/s"], fmt: bytes },
  { title: "Workers", keys: ["num_workers"], labels: ["workers"], fmt: (v) => v.toFixed(0) },
];

export function Metrics({ params }: { params: URLSearchParams }) {
  const node = params.get("node") ?? "cluster";
  const nodes = useApi<Page<NodeRow>>("api/nodes", { limit: 1000 }, { liveTypes: ["node"] });
  const hist = useApi<{ samples: HistorySample[]; window_s: number }>("api/history", { node_id: node }, { liveTypes: ["node_metrics"], minGapMs: 2000 });
  const links = useApi<{ prometheus_url: string | null; grafana_url: string | null }>("api/frontend/links");
  const data = useMemo(() => {
    const s = hist.data?.samples ?? [];
    const times = s.map((x) => x.time);
    return PANELS.map((p) => [times, ...p.keys.map((k) => s.map((x) => (x[k] as number | undefined) ?? (null as unknown as number)))]);
  }, [hist.data]);
  const user = useApi<UserMetricHistory>("api/metrics/user_history", { window_s: 1800 }, { liveTypes: ["node_metrics"], minGapMs: 2000 });
  const rates = useApi<TaskRates>("api/metrics/task_rates", { window_s: 600, bucket_s: 10 }, { liveTypes: ["tasks"], minGapMs: 2000, pollMs: 10_000 });
  // One chart per application metric, a line per tag set.
  const userCharts = useMemo(() => {
    const u = user.data;
    const byName = new Map<string, UserMetricHistory["series"]>();
    for (const s of u?.series ?? []) byName.set(s.name, [...(byName.get(s.name) ?? []), s]);
    return [...byName.entries()].map(([name, ss]) => ({
      name,
      type: ss[0].type,
      labels: ss.map((s) => Object.entries(s.tags).map(([k, v]) => `${k}=${v}`).join(",") || name),
      data: [u!.times, ...ss.map((s) => s.values.map((v) => v ?? (null as unknown as number)))],
    }));
  }, [user.data]);
  // Per function: tasks ended per second and their mean run time, whole buckets only.
  const fnCharts = useMemo(() => {
    const r = rates.data;
    if (!r) return [];
    const whole = wholeBuckets(r.times, r.bucket_s);
    const times = r.times.slice(0, whole);
    return r.functions.map((f) => ({
      name: f.name,
      rate: [times, f.finished.slice(0, whole).map((n) => n / r.bucket_s), f.failed.slice(0, whole).map((n) => n / r.bucket_s)],
      dur: [times, f.mean_duration_s.slice(0, whole).map((v) => v ?? (null as unknown as number))],
    }));
  }, [rates.data]);
  const prom = links.data?.prometheus_url;
  const grafana = links.data?.grafana_url;
  return (
    <div>
      <h1>Metrics</h1>
      <div class="toolbar">
        <label>
          Scope
          <select value={node} onChange={(e) => setParams({ node: (e.currentTarget as HTMLSelectElement).value === "cluster" ? undefined : (e.currentTarget as HTMLSelectElement).value })} data-testid="metrics-node">
            <option value="cluster">cluster</option>
            {(nodes.data?.items ?? []).map((n) => (
              <option key={n.node_id} value={n.node_id}>
                node {n.hostname ?? ""} {shortId(n.node_id, 12)}
              </option>
            ))}
          </select>
        </label>
        <span class="note">
          {hist.data ? `${hist.data.samples.length} samples over the last ${Math.round(hist.data.window_s / 60)} min kept by the dashboard` : ""}
        </span>
        <span class="count">
          <a href={apiUrl("metrics")} target="_blank" rel="noreferrer">Prometheus text (/metrics)</a>
          {prom && <> · <a href={prom} target="_blank" rel="noreferrer" data-testid="prometheus-link">Prometheus</a></>}
          {grafana && <> · <a href={grafana} target="_blank" rel="noreferrer" data-testid="grafana-link">Grafana</a></>}
          {!prom && !grafana && <span class="note"> · set EMBER_PROMETHEUS_HOST / EMBER_GRAFANA_HOST to link them here</span>}
        </span>
      </div>
      <ErrorBox error={hist.error} />
      <div class="charts" data-testid="metrics-charts">
        {PANELS.map((p, i) => (
          <Chart key={`${p.title}-${node}`} title={p.title} series={p.labels.map((l): SeriesSpec => ({ label: l, fmt: p.fmt }))} data={data[i]} yMax={p.yMax} testId={`metrics-${p.keys[0]}`} />
        ))}
      </div>
      <h2>Application metrics</h2>
      <ErrorBox error={user.error} />
      {user.data && userCharts.length === 0 && <div class="note">No application metrics yet: set them with ember.util.metrics (Counter, Gauge, Histogram).</div>}
      <div class="charts" data-testid="user-metrics-charts">
        {userCharts.map((c) => (
          <Chart key={`${c.name}|${c.labels.join("|")}`} title={`${c.name} (${c.type}${c.type === "histogram" ? ", mean" : ""})`} series={c.labels.map((l): SeriesSpec => ({ label: l, fmt: num }))} data={c.data} testId={`user-metric-${c.name}`} />
        ))}
      </div>
      <h2>Tasks by function (last 10 min, {rates.data?.bucket_s ?? 10} s buckets)</h2>
      <ErrorBox error={rates.error} />
      {rates.data && fnCharts.length === 0 && <div class="note">No task ended in the last 10 minutes.</div>}
      <div class="charts" data-testid="task-function-charts">
        {fnCharts.map((f) => [
          <Chart key={`rate-${f.name}`} title={`${f.name || "(unnamed)"}: tasks/s`} series={[{ label: "finished/s", color: "#2b8a3e", fmt: num }, { label: "failed/s", color: "#fa5252", fmt: num }]} data={f.rate} testId={`task-rate-${f.name}`} />,
          <Chart key={`dur-${f.name}`} title={`${f.name || "(unnamed)"}: mean run time`} series={[{ label: "mean", fmt: (v) => duration(v) }]} data={f.dur} testId={`task-duration-${f.name}`} />,
        ])}
      </div>
    </div>
  );
}

function num(v: number): string {
  const a = Math.abs(v);
  return a >= 1e6 ? `${+(v / 1e6).toFixed(2)}M` : a >= 1e3 ? `${+(v / 1e3).toFixed(2)}k` : `${+v.toFixed(a >= 10 ? 1 : 3)}`;
}
