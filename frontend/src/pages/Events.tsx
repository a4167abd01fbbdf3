// Every cluster event, of every severity (INFO, WARNING, ERROR): failed tasks with their
// tracebacks, dead workers and actors, lost nodes, the GCS's cluster events (what `ember list
// cluster-events` lists). Filtered on the server by severity, source, node, job and a time
// window; the filters live in the URL.
import { useMemo } from "preact/hooks";
import { ErrorBox, NodeSelect } from "../components/bits";
import { JobLink, NodeLink, WorkerLink } from "../components/links";
import type { Page } from "../lib/api";
import { useApi } from "../lib/data";
import { time } from "../lib/format";
import { setParams } from "../lib/router";
import type { EventRow } from "../lib/types";

const SEVERITIES = ["", "INFO", "WARNING", "ERROR"];
const SOURCES = ["", "task", "worker", "agent", "dashboard", "gcs", "autoscaler"];
// The time window's choices: seconds back from now ("" is all the dashboard keeps).
const WINDOWS: [string, string][] = [
  ["", "any time"],
  ["300", "last 5 min"],
  ["3600", "last hour"],
  ["86400", "last day"],
];
const LIMIT = 500;
// A severity drawn in the colour of the state that means as much (the badges' classes).
const SEVERITY_COLOR: Record<string, string> = { ERROR: "FAILED", WARNING: "PENDING", INFO: "FINISHED" };

function Choice(p: { label: string; value: string; options: [string, string][]; onChange: (v: string | undefined) => void; testId: string }) {
  return (
    <label>
      {p.label}
      <select value={p.value} onChange={(e) => p.onChange((e.currentTarget as HTMLSelectElement).value || undefined)} data-testid={p.testId}>
        {p.options.map(([v, text]) => (
          <option key={v} value={v}>
            {text}
          </option>
        ))}
      </select>
    </label>
  );
}

export function Events({ params }: { params: URLSearchParams }) {
  const severity = params.get("severity") ?? "";
  const source = params.get("source") ?? "";
  const node = params.get("node") ?? "";
  const job = params.get("job") ?? "";
  const win = params.get("window") ?? "";
  const filter = [severity && `severity=${severity}`, source && `source=${source}`, node && `node_id=${node}`, job && `job_id=${job}`].filter(Boolean) as string[];
  // The window's start is fixed when the window is picked, not per render (a start that moved
  // each second would make each render a new query).
  const since = useMemo(() => (win ? String(Math.floor(Date.now() / 1000) - Number(win)) : undefined), [win]);
  const ev = useApi<Page<EventRow>>("api/events", { filter, limit: LIMIT, since }, { liveTypes: ["event"], minGapMs: 1000 });
  const rows = ev.data?.items ?? [];
  return (
    <div>
      <h1>Events</h1>
      <div class="toolbar">
        <Choice label="Severity" value={severity} options={SEVERITIES.map((s) => [s, s || "any"])} onChange={(v) => setParams({ severity: v })} testId="event-severity" />
        <Choice label="Source" value={source} options={SOURCES.map((s) => [s, s || "any"])} onChange={(v) => setParams({ source: v })} testId="event-source" />
        <NodeSelect value={node} onChange={(v) => setParams({ node: v })} testId="event-node" />
        <label>
          Job
          <input value={job} placeholder="job id" size={10} onChange={(e) => setParams({ job: (e.currentTarget as HTMLInputElement).value || undefined })} data-testid="event-job" />
        </label>
        <Choice label="When" value={win} options={WINDOWS} onChange={(v) => setParams({ window: v })} testId="event-window" />
        <span class="count" data-testid="event-count">
          {ev.data ? `${ev.data.total.toLocaleString()} events${ev.data.total > rows.length ? ` (the newest ${rows.length} shown)` : ""}` : "…"}
        </span>
      </div>
      <ErrorBox error={ev.error} />
      <table class="table" data-testid="events-table">
        <thead>
          <tr>
            <th style={{ width: "100px" }}>Time</th>
            <th style={{ width: "90px" }}>Severity</th>
            <th style={{ width: "90px" }}>Source</th>
            <th style={{ width: "90px" }}>Node</th>
            <th style={{ width: "90px" }}>Job</th>
            <th style={{ width: "70px" }}>PID</th>
            <th>Message</th>
          </tr>
        </thead>
        <tbody>
          {rows.map((e, i) => (
            <tr key={`${e.time}-${i}`} data-testid="event-row" data-severity={e.severity}>
              <td title={new Date(e.time * 1000).toLocaleString()}>{time(e.time)}</td>
              <td>
                <span class={`state state-${SEVERITY_COLOR[e.severity] ?? ""}`}>{e.severity}</span>
              </td>
              <td>{e.source}</td>
              <td>
                <NodeLink id={e.node_id} />
              </td>
              <td>
                <JobLink id={e.job_id} />
              </td>
              <td>
                <WorkerLink node={e.node_id} pid={e.pid} />
              </td>
              <td>
                <span class="note">{e.kind}</span> {e.message}
                {e.detail && (
                  <details>
                    <summary class="note">traceback</summary>
                    <pre>{e.detail}</pre>
                  </details>
                )}
              </td>
            </tr>
          ))}
          {ev.data && rows.length === 0 && (
            <tr>
              <td class="empty" colSpan={7}>
                No events match.
              </td>
            </tr>
          )}
        </tbody>
      </table>
    </div>
  );
}
