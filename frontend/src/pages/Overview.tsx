// The cluster at a glance: capacity and use, task and actor counts, live charts from the
// dashboard's own metric history (no Prometheus needed), and the latest errors.
import { useMemo } from "preact/hooks";
import { Chart } from "../components/Chart";
import { ErrorBox, Stat, StateBadge, taskBuckets } from "../components/bits";
import { NodeLink, WorkerLink } from "../components/links";
import type { Page } from "../lib/api";
import { useApi } from "../lib/data";
import { bytes, pct, time } from "../lib/format";
import { href } from "../lib/router";
import { endedText, useVersion } from "../lib/session";
import type { ClusterStatus, EventRow, HistorySample, JobDetails } from "../lib/types";

export interface Throughput {
  bucket_s: number;
  times: number[];
  finished: number[];
  failed: number[];
}

function used(s: ClusterStatus | undefined, key: string): string {
  const total = s?.resources.total[key];
  if (!total) return "–";
  return `${+(s!.resources.used[key] ?? 0).toFixed(2)} / ${+total.toFixed(2)}`;
}

/** How many of the leading buckets (start times, `bucket_s` long) have ended by now. */
export function wholeBuckets(times: number[], bucket_s: number, now = Date.now() / 1000): number {
  let n = times.length;
  while (n > 0 && times[n - 1] + bucket_s > now + 1) n--;
  return n;
}

export function historyColumns(samples: HistorySample[] | undefined, keys: (keyof HistorySample)[]): number[][] {
  const s = samples ?? [];
  return [s.map((x) => x.time), ...keys.map((k) => s.map((x) => (x[k] as number | undefined) ?? (null as unknown as number)))];
}

export function Overview(_: { params: URLSearchParams }) {
  const status = useApi<ClusterStatus>("api/cluster_status", {}, { liveTypes: ["node", "actor", "tasks"], pollMs: 5000 });
  const hist = useApi<{ samples: HistorySample[] }>("api/history", { node_id: "cluster" }, { liveTypes: ["node_metrics"], minGapMs: 2000 });
  const tput = useApi<Throughput>("api/frontend/throughput", { window_s: 600 }, { liveTypes: ["tasks"], minGapMs: 2000, pollMs: 10000 });
  // Jobs are not on the stream: polled. A dashboard that cannot run jobs answers an error: "–".
  const jobs = useApi<JobDetails[]>("api/jobs/", {}, { pollMs: 2000 });
  const errors = useApi<Page<EventRow>>("api/events", { filter: "severity=ERROR", limit: 8 }, { liveTypes: ["event"] });
  const version = useVersion();
  const recorded = !!version?.history;
  const s = status.data;
  const last = hist.data?.samples[hist.data.samples.length - 1];
  const t = taskBuckets(s?.tasks);
  const a = s?.actors ?? {};

  const cpu = useMemo(() => historyColumns(hist.data?.samples, ["cpu_percent"]), [hist.data]);
  const mem = useMemo(() => historyColumns(hist.data?.samples, ["mem_used_bytes", "mem_total_bytes"]), [hist.data]);
  const store = useMemo(() => historyColumns(hist.data?.samples, ["object_store_used_bytes", "object_store_capacity_bytes"]), [hist.data]);
  const thr = useMemo(() => {
    const d = tput.data;
    if (!d) return [[], [], []];
    // Only whole buckets: one still filling would draw the rate falling to 0 at the live edge.
    const whole = wholeBuckets(d.times, d.bucket_s);
    return [d.times.slice(0, whole), d.finished.slice(0, whole).map((n) => n / d.bucket_s), d.failed.slice(0, whole).map((n) => n / d.bucket_s)];
  }, [tput.data]);

  return (
    <div>
      <h1>Overview</h1>
      <ErrorBox error={status.error} />
      <div class="cards" data-testid="overview-stats">
        <Stat label="Nodes" value={s ? s.nodes.alive.length : "–"} sub={s && s.nodes.dead.length ? `${s.nodes.dead.length} dead` : "all alive"} testId="stat-nodes" />
        <Stat label="CPUs used / total" value={used(s, "CPU")} testId="stat-cpus" />
        <Stat label="GPUs used / total" value={used(s, "GPU")} testId="stat-gpus" />
        <Stat label="Memory" value={last?.mem_used_bytes !== undefined ? bytes(last.mem_used_bytes) : "–"} sub={last?.mem_total_bytes ? `of ${bytes(last.mem_total_bytes)}` : undefined} testId="stat-memory" />
        <Stat label="Object store" value={last?.object_store_used_bytes !== undefined ? bytes(last.object_store_used_bytes) : "–"} sub={last?.object_store_capacity_bytes ? `of ${bytes(last.object_store_capacity_bytes)}` : undefined} testId="stat-store" />
        <Stat label="Tasks running" value={t.running} sub={`${t.pending} pending · ${t.finished} finished`} testId="stat-tasks-running" />
        <Stat label="Tasks failed" value={<a href={href("tasks", { state: "FAILED" })}>{t.failed}</a>} testId="stat-tasks-failed" />
        <Stat label="Actors alive" value={<a href={href("actors", { state: "ALIVE" })}>{a.ALIVE ?? 0}</a>} sub={`${a.PENDING ?? 0} pending · ${a.RESTARTING ?? 0} restarting · ${a.DEAD ?? 0} dead`} testId="stat-actors" />
        <Stat
          label="Jobs running"
          value={jobs.data ? <a href={href("jobs", { status: "RUNNING" })} data-testid="running-jobs-link">{jobs.data.filter((j) => j.status === "RUNNING").length}</a> : "–"}
          sub={jobs.data ? <a href={href("jobs")}>{jobs.data.length} jobs in all</a> : jobs.error ? "jobs need a cluster head" : undefined}
          testId="stat-jobs-running"
        />
        <Stat label={recorded ? "CPU at the end" : "CPU now"} value={pct(last?.cpu_percent)} testId="stat-cpu-now" />
      </div>
      {s && Object.values(s.dropped).some((n) => n > 0) && (
        <div class="note">
          The dashboard dropped records past its caps: {Object.entries(s.dropped).filter(([, n]) => n > 0).map(([k, n]) => `${k} ${n}`).join(", ")}.
        </div>
      )}
      <h2 data-testid="charts-heading">{recorded ? `Recorded session (${endedText(version)})` : "Live"}</h2>
      <ErrorBox error={hist.error} />
      <div class="charts">
        <Chart title="CPU" series={[{ label: "CPU %", fmt: (v) => `${v.toFixed(0)}%` }]} data={cpu} yMax={100} testId="chart-cpu" />
        <Chart title="Memory" series={[{ label: "used", fmt: bytes }, { label: "total", fmt: bytes }]} data={mem} testId="chart-memory" />
        <Chart title="Object store" series={[{ label: "used", fmt: bytes }, { label: "capacity", fmt: bytes }]} data={store} testId="chart-store" />
        <Chart title="Task throughput" series={[{ label: "finished/s", color: "#2b8a3e", fmt: (v) => v.toFixed(1) }, { label: "failed/s", color: "#fa5252", fmt: (v) => v.toFixed(1) }]} data={thr} testId="chart-throughput" />
      </div>
      <h2>
        Recent errors{" "}
        <a class="note" href={href("events")} data-testid="all-events-link">
          all events
        </a>
      </h2>
      <ErrorBox error={errors.error} />
      <table class="table" data-testid="recent-errors">
        <tbody>
          {(errors.data?.items ?? []).map((e, i) => (
            <tr key={`${e.time}-${i}`}>
              <td style={{ width: "110px" }}>{time(e.time)}</td>
              <td style={{ width: "90px" }}>
                <StateBadge state={e.severity === "ERROR" ? "FAILED" : e.severity} />
              </td>
              <td>
                {e.message}
                {e.node_id && (
                  <span class="note">
                    {" · node "}
                    <NodeLink id={e.node_id} />
                    {e.pid ? (
                      <>
                        {" · pid "}
                        <WorkerLink node={e.node_id} pid={e.pid} />
                      </>
                    ) : null}
                  </span>
                )}
                {e.detail && (
                  <details>
                    <summary class="note">traceback</summary>
                    <pre>{e.detail}</pre>
                  </details>
                )}
              </td>
            </tr>
          ))}
          {errors.data && errors.data.items.length === 0 && (
            <tr>
              <td class="empty">No errors.</td>
            </tr>
          )}
        </tbody>
      </table>
    </div>
  );
}
