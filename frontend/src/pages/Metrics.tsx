// Metrics: every series of the dashboard's own history (30 minutes, no Prometheus needed),
// for the cluster and per node, live; links to Prometheus and Grafana when configured.
import { useMemo } from "preact/hooks";
import { Chart, type SeriesSpec } from "../components/Chart";
import { ErrorBox } from "../components/bits";
import { apiUrl, type Page } from "../lib/api";
import { useApi } from "../lib/data";
import { bytes, shortId } from "../lib/format";
import { setParams } from "../lib/router";
import type { HistorySample, NodeRow } from "../lib/types";

const PANELS: { title: string; keys: (keyof HistorySample)[]; labels: string[]; fmt: (v: number) => string; yMax?: number }[] = [
  { title: "CPU", keys: ["cpu_percent"], labels: ["CPU %"], fmt: (v) => `${v.toFixed(0)}%`, yMax: 100 },
  { title: "Memory", keys: ["mem_used_bytes", "mem_total_bytes"], labels: ["used", "total"], fmt: bytes },
  { title: "Object store", keys: ["object_store_used_bytes", "object_store_capacity_bytes"], labels: ["used", "capacity"], fmt: bytes },
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
    </div>
  );
}
