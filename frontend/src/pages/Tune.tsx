// Tune experiments, live and finished (and in a stopped session's history): the experiments,
// one experiment's trials table (every hyperparameter, last and best of each metric, node,
// actor, logs, error with its traceback; columns, sort and filter chosen by the user, in the
// URL), live curves of the chosen trials, the best trial marked, parallel coordinates, and
// stop buttons (behind the cluster token, as every request).
import { useMemo, useState } from "preact/hooks";
import { Chart } from "../components/Chart";
import { ErrorBox, StateBadge } from "../components/bits";
import { ActorLink, JobLink, NodeLink, WorkerLink } from "../components/links";
import { ParallelCoords } from "../components/ParallelCoords";
import { errorText, postJSON } from "../lib/api";
import { useApi } from "../lib/data";
import { duration, time } from "../lib/format";
import { href, setParams } from "../lib/router";

interface Experiment {
  name: string;
  path: string;
  status: string;
  stop_reason: string;
  metric: string | null;
  mode: string | null;
  start_time: number | null;
  end_time: number | null;
  job_id: string;
  num_trials: number;
  status_counts: Record<string, number>;
  best_trial_id: string | null;
  best_value: number | null;
  updated: number | null;
}
type Row = Record<string, unknown> & { trial_id: string; status?: string };
interface TrialPage {
  items: Row[];
  total: number;
  columns: string[];
  best_trial_id: string | null;
  metric: string | null;
  mode: string | null;
}
interface Curve {
  iter: number[];
  time: number[];
  metrics: Record<string, (number | null)[]>;
}

const POLL_MS = 2000;
const PAGE = 200;
const MAX_CURVES = 8;
const SILENT_S = 30; // a running experiment's driver rewrites its record every 0.5 s
const enc = encodeURIComponent;

function fmt(v: unknown): string {
  if (v === null || v === undefined) return "–";
  if (typeof v === "number") return Number.isInteger(v) ? String(v) : Math.abs(v) < 1e-3 || Math.abs(v) >= 1e5 ? v.toExponential(3) : String(+v.toFixed(4));
  if (typeof v === "object") return JSON.stringify(v);
  return String(v);
}

export function Tune({ params }: { params: URLSearchParams }) {
  const list = useApi<{ experiments: Experiment[]; history: boolean }>("api/tune/experiments", {}, { pollMs: POLL_MS });
  const exps = list.data?.experiments ?? [];
  const sel = params.get("exp") ?? exps[0]?.name ?? "";
  const exp = exps.find((e) => e.name === sel);
  return (
    <div>
      <h1>Tune</h1>
      <ErrorBox error={list.error} />
      <table class="table" data-testid="tune-experiments">
        <thead>
          <tr>
            <th>Experiment</th>
            <th>Status</th>
            <th>Trials</th>
            <th>Metric</th>
            <th>Best</th>
            <th>Started</th>
            <th>Job</th>
          </tr>
        </thead>
        <tbody>
          {exps.map((e) => (
            <tr key={e.name} class={e.name === sel ? "selected" : ""} data-testid="tune-experiment" data-name={e.name} data-status={e.status}>
              <td>
                <a href={href("tune", { exp: e.name })}>{e.name}</a>
                <div class="note">{e.path}</div>
              </td>
              <td>
                <StateBadge state={e.status} />
                {e.stop_reason && <div class="note">{e.stop_reason}</div>}
                {e.status === "RUNNING" && !list.data?.history && e.updated && Date.now() / 1000 - e.updated > SILENT_S && (
                  <div class="note" data-testid="tune-silent">
                    no word from its driver for {duration(Date.now() / 1000 - e.updated)}: it may have died (Tuner.restore resumes it)
                  </div>
                )}
              </td>
              <td>
                {e.num_trials}{" "}
                <span class="note">
                  {Object.entries(e.status_counts)
                    .map(([s, n]) => `${n} ${s.toLowerCase()}`)
                    .join(", ")}
                </span>
              </td>
              <td>{e.metric ? `${e.metric} (${e.mode})` : "–"}</td>
              <td>{fmt(e.best_value)}</td>
              <td>{time(e.start_time)}</td>
              <td>
                <JobLink id={e.job_id} />
              </td>
            </tr>
          ))}
          {list.data && exps.length === 0 && (
            <tr>
              <td class="empty" colSpan={7}>
                No Tune experiments yet: a driver running tune.Tuner(...).fit() or tune.run(...) on this cluster shows here.
              </td>
            </tr>
          )}
        </tbody>
      </table>
      {exp && <ExperimentView key={exp.name} exp={exp} params={params} history={!!list.data?.history} />}
    </div>
  );
}

function ExperimentView({ exp, params, history }: { exp: Experiment; params: URLSearchParams; history: boolean }) {
  const sortBy = params.get("sort") ?? undefined;
  const desc = params.get("desc") === "1";
  const filter = params.getAll("filter");
  const [draft, setDraft] = useState(filter.join(" "));
  const running = exp.status === "RUNNING";
  const page = useApi<TrialPage>(`api/tune/experiments/${enc(exp.name)}/trials`, { limit: PAGE, sort_by: sortBy, descending: desc, filter }, { pollMs: running ? POLL_MS : undefined });
  const [picked, setPicked] = useState<string[] | null>(null);
  const [action, setAction] = useState<string | undefined>();
  const data = page.data;
  const rows = data?.items ?? [];
  const all = data?.columns ?? [];
  const metrics = all.filter((c) => c.startsWith("last/")).map((c) => c.slice(5));
  const hyper = all.filter((c) => c.startsWith("config/"));
  const defaults = ["trial_id", "status", ...hyper, ...metrics.flatMap((m) => [`last/${m}`, `best/${m}`]).filter((c) => all.includes(c)), "iterations", "time_total_s", "node_id", "actor_id", "pid", "error"];
  const colsParam = params.get("cols");
  const cols = (colsParam ? colsParam.split(",") : defaults).filter((c) => all.includes(c) || c === "node_id" || c === "pid");
  const best = data?.best_trial_id ?? null;
  const chosen = picked ?? [...(best ? [best] : []), ...rows.map((r) => r.trial_id).filter((t) => t !== best)].slice(0, MAX_CURVES);

  const stop = (trial?: string) => {
    const path = `api/tune/experiments/${enc(exp.name)}${trial ? `/trials/${enc(trial)}` : ""}/stop`;
    postJSON<{ reason: string }>(path, { reason: "stopped from the dashboard" })
      .then(() => setAction(`asked to stop ${trial ? `trial ${trial}` : `experiment ${exp.name}`}; its driver stops it within a second or two`))
      .catch((e) => setAction(errorText(e)));
  };
  const sortOn = (c: string) => setParams({ sort: c, desc: sortBy === c && !desc ? "1" : undefined });
  const toggleCol = (c: string) => {
    const next = cols.includes(c) ? cols.filter((x) => x !== c) : [...cols, c];
    setParams({ cols: next.join(",") });
  };
  return (
    <div data-testid="tune-experiment-view" data-name={exp.name}>
      <h2>
        {exp.name} <StateBadge state={exp.status} />
        {running && !history && (
          <button class="danger" onClick={() => stop()} data-testid="tune-stop-experiment">
            Stop experiment
          </button>
        )}
      </h2>
      <div class="note">
        {exp.path} · started {time(exp.start_time)}
        {exp.end_time ? ` · ended ${time(exp.end_time)}` : ""}
        {exp.metric ? ` · ${exp.mode} ${exp.metric}` : ""}
      </div>
      {action && (
        <div class="note" role="status" data-testid="tune-action">
          {action}
        </div>
      )}
      <ErrorBox error={page.error} />
      <Curves exp={exp} trials={chosen} metrics={metrics} best={best} running={running} />
      {data && hyper.length > 0 && (
        <ParallelCoords trials={rows.map((r) => ({ id: r.trial_id, values: r }))} params={hyper} metric={data.metric} mode={data.mode} best={best} />
      )}
      <div class="toolbar">
        <label>
          Filter
          <input
            value={draft}
            placeholder="status=RUNNING config/lr=0.01"
            size={30}
            onInput={(e) => setDraft((e.currentTarget as HTMLInputElement).value)}
            onKeyDown={(e) => {
              if (e.key !== "Enter") return;
              const parts = draft.split(/\s+/).filter(Boolean);
              const r = new URLSearchParams(params);
              r.delete("filter");
              parts.forEach((p) => r.append("filter", p));
              location.hash = `#/tune?${r.toString()}`;
            }}
            data-testid="tune-filter"
          />
        </label>
        <details class="columns-pick">
          <summary>Columns</summary>
          {[...new Set([...defaults, ...all])].map((c) => (
            <label key={c}>
              <input type="checkbox" checked={cols.includes(c)} onChange={() => toggleCol(c)} data-testid={`tune-col-${c}`} /> {c}
            </label>
          ))}
        </details>
        <span class="count" data-testid="tune-trial-count">
          {data ? `${data.total} trials${data.total > rows.length ? ` (${rows.length} shown)` : ""}` : "…"}
        </span>
      </div>
      <table class="table" data-testid="tune-trials">
        <thead>
          <tr>
            <th title="tick to draw its curves">plot</th>
            {cols.map((c) => (
              <th key={c} onClick={() => sortOn(c)} style={{ cursor: "pointer" }} data-col={c}>
                {c}
                {sortBy === c ? (desc ? " ▼" : " ▲") : ""}
              </th>
            ))}
            {running && !history && <th />}
          </tr>
        </thead>
        <tbody>
          {rows.map((r) => (
            <tr key={r.trial_id} data-testid="tune-trial" data-trial={r.trial_id} data-status={r.status} data-best={r.trial_id === best ? "1" : undefined} class={r.trial_id === best ? "best" : ""}>
              <td>
                <input
                  type="checkbox"
                  checked={chosen.includes(r.trial_id)}
                  onChange={() => setPicked(chosen.includes(r.trial_id) ? chosen.filter((t) => t !== r.trial_id) : [...chosen, r.trial_id].slice(-MAX_CURVES))}
                />
              </td>
              {cols.map((c) => (
                <td key={c} data-col={c}>
                  <Cell row={r} col={c} best={best} />
                </td>
              ))}
              {running && !history && (
                <td>
                  {(r.status === "RUNNING" || r.status === "PENDING" || r.status === "PAUSED") && (
                    <button onClick={() => stop(r.trial_id)} data-testid="tune-stop-trial">
                      Stop
                    </button>
                  )}
                </td>
              )}
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}

function Cell({ row, col, best }: { row: Row; col: string; best: string | null }) {
  const v = row[col];
  switch (col) {
    case "trial_id":
      return (
        <span class="mono" title={String(row.trial_name ?? "")}>
          {String(v)}
          {v === best && (
            <span class="best-mark" title="the best trial (by its last result)" data-testid="tune-best">
              {" "}★ best
            </span>
          )}
        </span>
      );
    case "status":
      return (
        <>
          <StateBadge state={v as string} />
          {row.stop_reason ? <div class="note">{String(row.stop_reason)}</div> : null}
        </>
      );
    case "node_id":
      return <NodeLink id={v as string} />;
    case "actor_id":
      return <ActorLink id={v as string} />;
    case "pid":
      return <WorkerLink node={row.node_id as string} pid={v as number} />;
    case "time_total_s":
      return <>{duration(v as number)}</>;
    case "start_time":
      return <>{time(v as number)}</>;
    case "error":
      if (!v) return <>–</>;
      return (
        <details data-testid="tune-error">
          <summary class="note">{String(v).trim().split("\n").slice(-1)[0].slice(0, 80)}</summary>
          <pre data-testid="tune-traceback">{String(v)}</pre>
        </details>
      );
    default:
      return <>{fmt(v)}</>;
  }
}

function Curves({ exp, trials, metrics, best, running }: { exp: Experiment; trials: string[]; metrics: string[]; best: string | null; running: boolean }) {
  const [metricSel, setMetric] = useState<string | null>(null);
  const [xAxis, setX] = useState<"iter" | "time">("iter");
  const metric = metricSel ?? (exp.metric && metrics.includes(exp.metric) ? exp.metric : metrics[0]) ?? null;
  const res = useApi<{ curves: Record<string, Curve> }>(
    trials.length && metric ? `api/tune/experiments/${enc(exp.name)}/curves` : null,
    { trial: trials, metric: metric ?? undefined },
    { pollMs: running ? POLL_MS : undefined },
  );
  const { data, series } = useMemo(() => {
    const curves = res.data?.curves ?? {};
    const ids = trials.filter((t) => curves[t]);
    const xs = [...new Set(ids.flatMap((t) => curves[t][xAxis]))].sort((a, b) => a - b);
    const cols = ids.map((t) => {
      const c = curves[t];
      const at = new Map<number, number | null>();
      c[xAxis].forEach((x, i) => at.set(x, c.metrics[metric ?? ""]?.[i] ?? null));
      return xs.map((x) => (at.has(x) ? (at.get(x) as number | null) : null));
    });
    return {
      data: [xs, ...cols] as number[][],
      series: ids.map((t) => ({ label: t === best ? `${t} ★` : t, color: t === best ? "#e4572e" : undefined })),
    };
  }, [res.data, trials, metric, xAxis, best]);
  if (!metrics.length) return null;
  return (
    <div class="card" data-testid="tune-curves">
      <div class="toolbar">
        <label>
          Metric
          <select value={metric ?? ""} onChange={(e) => setMetric((e.currentTarget as HTMLSelectElement).value)} data-testid="tune-curve-metric">
            {metrics.map((m) => (
              <option key={m} value={m}>
                {m}
              </option>
            ))}
          </select>
        </label>
        <label>
          Against
          <select value={xAxis} onChange={(e) => setX((e.currentTarget as HTMLSelectElement).value as "iter" | "time")} data-testid="tune-curve-x">
            <option value="iter">training iteration</option>
            <option value="time">time (s)</option>
          </select>
        </label>
        <span class="note">tick trials in the table to compare them (at most {MAX_CURVES})</span>
      </div>
      <ErrorBox error={res.error} />
      {series.length > 0 && <Chart title={`${metric} per trial`} series={series} data={data} height={220} xPlain yFit testId="tune-chart" />}
    </div>
  );
}
