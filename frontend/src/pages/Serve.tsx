// Serve applications, live (GET /api/serve/view, from the Serve controller's KV records):
// each application's status and route prefix; its deployments with replicas target/running,
// request rate, error rate and p50/p99 latency over the last window, with small live charts
// of the last minute; the replicas (state, node, actor, logs of their pid); and the
// controller's recent decisions with their reasons.
import { useMemo } from "preact/hooks";
import { Chart } from "../components/Chart";
import { ErrorBox, StateBadge } from "../components/bits";
import { ActorLink, NodeLink, WorkerLink } from "../components/links";
import { useApi } from "../lib/data";
import { time } from "../lib/format";

interface Figures {
  requests: number;
  errors: number;
  rate: number;
  error_rate: number;
  error_ratio: number;
  p50_ms: number | null;
  p95_ms: number | null;
  p99_ms: number | null;
}
interface Replica {
  replica_id: string;
  state: string;
  node_id: string | null;
  actor_id: string | null;
  actor_name: string | null;
  pid: number | null;
}
interface Deployment {
  name: string;
  status: string;
  message: string;
  target_replicas: number;
  running_replicas: number;
  window: Figures;
  series: [number, number, number, number | null, number | null][];
  requests_total: number;
  errors_total: number;
  replicas: Replica[];
}
interface App {
  name: string;
  status: string;
  message: string;
  route_prefix: string | null;
  deployments: Deployment[];
}
interface Decision {
  time: number;
  app: string;
  deployment: string;
  kind: string;
  message: string;
}
interface ServeView {
  running: boolean;
  history?: boolean; // a stopped session's dashboard (--history): Serve as it last ran
  stopped?: number | null; // when Serve was shut down, if it was before the cluster stopped
  window_s: number;
  applications: App[];
  decisions: Decision[];
}

const POLL_MS = 1000;

const rate = (v: number) => (v >= 100 ? v.toFixed(0) : v >= 1 ? v.toFixed(1) : v.toFixed(2));
const ms = (v: number | null | undefined) => (v === null || v === undefined ? "–" : v >= 100 ? `${v.toFixed(0)} ms` : `${v.toFixed(1)} ms`);

function DeploymentCharts({ d }: { d: Deployment }) {
  const traffic = useMemo(() => [d.series.map((p) => p[0]), d.series.map((p) => p[1]), d.series.map((p) => p[2])], [d.series]);
  const latency = useMemo(
    () => [d.series.map((p) => p[0]), d.series.map((p) => p[3] ?? NaN), d.series.map((p) => p[4] ?? NaN)],
    [d.series],
  );
  return (
    <div class="charts">
      <Chart
        title={`${d.name}: requests/s`}
        height={120}
        series={[
          { label: "requests/s", color: "#2e86de", fmt: rate },
          { label: "errors/s", color: "#e4572e", fmt: rate },
        ]}
        data={traffic}
        testId={`chart-rate-${d.name}`}
      />
      <Chart
        title={`${d.name}: latency`}
        height={120}
        series={[
          { label: "p50", color: "#17a589", fmt: (v) => ms(v) },
          { label: "p99", color: "#8e44ad", fmt: (v) => ms(v) },
        ]}
        data={latency}
        testId={`chart-latency-${d.name}`}
      />
    </div>
  );
}

function DeploymentBlock({ app, d, windowS }: { app: string; d: Deployment; windowS: number }) {
  const w = d.window;
  return (
    <div data-testid="serve-deployment" data-app={app} data-deployment={d.name}>
      <h3>
        {d.name} <StateBadge state={d.status} />
      </h3>
      {d.message && <div class="note">{d.message}</div>}
      <table class="table">
        <thead>
          <tr>
            <th>Replicas (running / target)</th>
            <th>Requests/s ({windowS.toFixed(0)} s)</th>
            <th>Errors/s</th>
            <th>p50</th>
            <th>p95</th>
            <th>p99</th>
            <th>Requests (total)</th>
            <th>Errors (total)</th>
          </tr>
        </thead>
        <tbody>
          <tr>
            <td data-testid="replicas-count">
              {d.running_replicas} / {d.target_replicas}
            </td>
            <td data-testid="request-rate" data-value={w.rate}>
              {rate(w.rate)}
            </td>
            <td data-testid="error-rate" data-value={w.error_rate}>
              {rate(w.error_rate)}
            </td>
            <td>{ms(w.p50_ms)}</td>
            <td>{ms(w.p95_ms)}</td>
            <td>{ms(w.p99_ms)}</td>
            <td data-testid="requests-total">{d.requests_total}</td>
            <td>{d.errors_total}</td>
          </tr>
        </tbody>
      </table>
      <DeploymentCharts d={d} />
      <table class="table" data-testid="replicas-table">
        <thead>
          <tr>
            <th>Replica</th>
            <th>State</th>
            <th>Node</th>
            <th>Actor</th>
            <th>Logs (pid)</th>
          </tr>
        </thead>
        <tbody>
          {d.replicas.map((r) => (
            <tr key={r.replica_id} data-testid="replica-row" data-replica={r.replica_id}>
              <td class="mono">{r.replica_id}</td>
              <td>
                <StateBadge state={r.state} />
              </td>
              <td>
                <NodeLink id={r.node_id} />
              </td>
              <td>
                <ActorLink id={r.actor_id} />
              </td>
              <td>
                <WorkerLink node={r.node_id} pid={r.pid} />
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}

export function Serve(_: { params: URLSearchParams }) {
  const v = useApi<ServeView>("api/serve/view", {}, { pollMs: POLL_MS });
  const s = v.data;
  if (v.error) return <ErrorBox error={v.error} />;
  if (!s) return <div class="note">Loading…</div>;
  return (
    <div>
      <h1>Serve</h1>
      {s.history && (
        <div class="note" data-testid="serve-history">
          {s.applications.length
            ? `Recorded session: Serve as it last ran${s.stopped ? `, until it was shut down at ${new Date(s.stopped * 1000).toLocaleString()}` : ""}.`
            : "Recorded session: Serve did not run in it."}
        </div>
      )}
      {!s.running && !s.history && (
        <div class="note" data-testid="serve-absent">
          Serve does not run on this cluster. Start an application with `serve.run(...)` in a driver, or `ember serve deploy CONFIG.yaml`.
        </div>
      )}
      {s.applications.map((a) => (
        <section key={a.name} data-testid="serve-app" data-app={a.name}>
          <h2>
            {a.name} <StateBadge state={a.status} /> <span class="mono">{a.route_prefix ?? "(no route)"}</span>
          </h2>
          {a.message && <div class="note">{a.message}</div>}
          {a.deployments.map((d) => (
            <DeploymentBlock key={d.name} app={a.name} d={d} windowS={s.window_s} />
          ))}
        </section>
      ))}
      <h2>Controller decisions</h2>
      <table class="table" data-testid="serve-decisions">
        <thead>
          <tr>
            <th>Time</th>
            <th>Application</th>
            <th>Deployment</th>
            <th>Decision</th>
            <th>Reason</th>
          </tr>
        </thead>
        <tbody>
          {s.decisions.map((e, i) => (
            <tr key={i} data-testid="serve-decision">
              <td>{time(e.time)}</td>
              <td>{e.app}</td>
              <td>{e.deployment || "–"}</td>
              <td>{e.kind}</td>
              <td>{e.message}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}
