// Jobs: the submitted jobs (Ray's Jobs API, /api/jobs/), newest first, polled every 2 s (the
// live stream does not carry jobs). Selecting one (sel=) shows its status and message, its
// settings, the progress of its driver's tasks, links to its tasks and actors, and its log:
// the tail WebSocket while it runs (from the end of a long log), then the log's end, at most
// MAX_LINES lines kept. Stop and Delete ask first.
import { useEffect, useRef, useState } from "preact/hooks";
import { BarLegend, ErrorBox, Modal, ProgressBar, StateBadge, taskBuckets } from "../components/bits";
import { WorkerLink } from "../components/links";
import { apiUrl, deleteJSON, errorText, getJSONAndHeaders, postJSON, wsUrl } from "../lib/api";
import { useApi, useNow } from "../lib/data";
import { bytes, duration, resources, shortId, time } from "../lib/format";
import { href, setParams } from "../lib/router";
import type { JobDetails, TaskSummary } from "../lib/types";

const STATUSES = ["", "PENDING", "RUNNING", "STOPPED", "SUCCEEDED", "FAILED"];
const ENDED = new Set(["STOPPED", "SUCCEEDED", "FAILED"]);
/** The most log lines the page keeps for one job; older ones are dropped (and counted). */
export const MAX_LINES = 5000;
// What the page asks of a log: its end, not all of it (a 200 MB log would otherwise stream
// whole into the browser to keep its last MAX_LINES lines).
const LOG_LAST_BYTES = 1 << 20;
const FLUSH_MS = 200; // how often the live tail's new lines are rendered
// ... and while a log floods (half the kept lines or more since the last render): each render
// lays out the whole view again, and five a second kept the browser behind the log (200 MB
// followed in 35 s, against 11 s at one a second).
const FLOOD_FLUSH_MS = 1000;
const POLL_MS = 2000;

export const jobEnded = (j: JobDetails) => ENDED.has(j.status);

/** Seconds from submission to the end, or to `now` (ms) while the job has not ended. */
function jobSeconds(j: JobDetails, now: number): number | undefined {
  if (!j.start_time) return undefined;
  return ((j.end_time ?? now) - j.start_time) / 1000;
}

/** The driver's job id (the one its tasks and actors carry), once the driver called init(). */
const driverJob = (j: JobDetails) => j.job_id || j.driver_info?.id || "";
// A job's id in the API: its submission id, or a driver started by hand's job id.
const jobKey = (j: JobDetails) => j.submission_id ?? j.job_id ?? "";

const msTime = (ms: number | null | undefined) => time(ms ? ms / 1000 : null);

export function Jobs({ params }: { params: URLSearchParams }) {
  const status = params.get("status") ?? "";
  const sel = params.get("sel") ?? "";
  const jobs = useApi<JobDetails[]>("api/jobs/", {}, { pollMs: POLL_MS });
  const all = (jobs.data ?? []).slice().sort((a, b) => (b.start_time ?? 0) - (a.start_time ?? 0));
  const counts: Record<string, number> = {};
  for (const j of all) counts[j.status] = (counts[j.status] ?? 0) + 1;
  const rows = status ? all.filter((j) => j.status === status) : all;
  const now = useNow(all.some((j) => !jobEnded(j)));
  const selected = sel ? all.find((j) => j.submission_id === sel || j.job_id === sel) : undefined;

  return (
    <div>
      <h1>Jobs</h1>
      <div class="toolbar">
        <label>
          Status
          <select value={status} onChange={(e) => setParams({ status: (e.currentTarget as HTMLSelectElement).value || undefined })} data-testid="job-status-filter">
            {STATUSES.map((s) => (
              <option key={s} value={s}>
                {s ? `${s} (${counts[s] ?? 0})` : "any"}
              </option>
            ))}
            {status && !STATUSES.includes(status) && <option value={status}>{status}</option>}
          </select>
        </label>
        <span class="count" data-testid="job-count">
          {jobs.data ? `${rows.length} of ${all.length} jobs` : "…"}
        </span>
      </div>
      <ErrorBox error={jobs.error} />
      <div class={sel ? "split" : ""}>
        <table class="table" data-testid="jobs-table">
          <thead>
            <tr>
              <th style={{ width: "110px" }}>Status</th>
              <th>Entrypoint</th>
              <th>Submission id</th>
              <th class="num">Duration</th>
              <th>Node</th>
              <th>Started</th>
            </tr>
          </thead>
          <tbody>
            {rows.map((j) => (
              <tr
                key={jobKey(j)}
                class={`clickable ${selected && jobKey(selected) === jobKey(j) ? "selected" : ""} ${j.status === "FAILED" ? "row-infeasible" : ""}`}
                onClick={() => setParams({ sel: jobKey(j) === sel ? undefined : jobKey(j) })}
                data-testid="job-row"
                data-submission-id={jobKey(j)}
                data-status={j.status}
              >
                <td data-testid="job-status">
                  <StateBadge state={j.status} />
                </td>
                <td class="mono" style={{ wordBreak: "break-all" }} title={j.entrypoint}>
                  {j.entrypoint.length > 120 ? `${j.entrypoint.slice(0, 120)}…` : j.entrypoint}
                </td>
                <td class="mono">{j.submission_id ?? `driver ${j.job_id ?? ""}`}</td>
                <td class="num" data-testid="job-duration">
                  {duration(jobSeconds(j, now))}
                </td>
                <td class="mono" title={j.driver_node_id ?? ""}>
                  {j.driver_node_ip || j.driver_info?.node_ip_address || "–"} {j.driver_node_id ? shortId(j.driver_node_id) : ""}
                </td>
                <td>{msTime(j.start_time)}</td>
              </tr>
            ))}
            {jobs.data && rows.length === 0 && (
              <tr>
                <td colSpan={6} class="empty" data-testid="jobs-empty">
                  {all.length ? `No ${status} jobs.` : "No jobs submitted yet (ember job submit, or Ray's JobSubmissionClient)."}
                </td>
              </tr>
            )}
          </tbody>
        </table>
        {sel &&
          (selected ? (
            <JobDetail job={selected} now={now} onChanged={jobs.reload} />
          ) : jobs.data ? (
            <div class="card detail" data-testid="job-detail-missing">
              No job {sel} (deleted, or never submitted here). <a href={href("jobs", { status: status || undefined })}>Close</a>
            </div>
          ) : (
            <div class="card detail">Loading…</div>
          ))}
      </div>
    </div>
  );
}

function entrypointResources(j: JobDetails): string {
  const r: Record<string, number> = { ...(j.entrypoint_resources ?? {}) };
  if (j.entrypoint_num_cpus) r.CPU = j.entrypoint_num_cpus;
  if (j.entrypoint_num_gpus) r.GPU = j.entrypoint_num_gpus;
  const mem = j.entrypoint_memory ? `memory: ${bytes(j.entrypoint_memory)}` : "";
  const rest = Object.keys(r).length ? resources(r) : "";
  return [rest, mem].filter(Boolean).join(", ") || "none";
}

function JobDetail({ job: j, now, onChanged }: { job: JobDetails; now: number; onChanged: () => void }) {
  const [confirm, setConfirm] = useState<"stop" | "delete" | null>(null);
  const [busy, setBusy] = useState<string | undefined>();
  const [note, setNote] = useState<string | undefined>();
  const [err, setErr] = useState<string | undefined>();
  const ended = jobEnded(j);
  const id = encodeURIComponent(jobKey(j));
  const driver = driverJob(j);
  useEffect(() => {
    setNote(undefined);
    setErr(undefined);
  }, [jobKey(j)]);

  const run = async (what: string, f: () => Promise<void>) => {
    setConfirm(null);
    setBusy(what);
    setErr(undefined);
    try {
      await f();
    } catch (e) {
      setErr(`${what}: ${errorText(e)}`);
    } finally {
      setBusy(undefined);
      onChanged();
    }
  };
  // Stop answers once the job reads STOPPED (SIGTERM, SIGKILL after a few seconds).
  const stop = () =>
    run("Stop", async () => {
      const r = await postJSON<{ stopped: boolean }>(`api/jobs/${id}/stop`, undefined, undefined, 60_000);
      setNote(r.stopped ? "Stopped." : "The job had already ended.");
    });
  const del = () =>
    run("Delete", async () => {
      await deleteJSON<{ deleted: boolean }>(`api/jobs/${id}`);
      setParams({ sel: undefined });
    });

  const meta = Object.entries(j.metadata ?? {});
  const env = j.runtime_env && Object.keys(j.runtime_env).length ? j.runtime_env : null;
  return (
    <div class="card detail" data-testid="job-detail" data-submission-id={jobKey(j)} data-status={j.status}>
      <h2>
        Job <span class="mono">{jobKey(j)}</span>{" "}
        <span data-testid="job-detail-status">
          <StateBadge state={j.status} />
        </span>
      </h2>
      {j.status === "FAILED" ? (
        <pre class="error" data-testid="job-message">
          {j.message}
        </pre>
      ) : (
        <div class="note" data-testid="job-message">
          {j.message}
        </div>
      )}
      <dl>
        <dt>Entrypoint</dt>
        <dd class="mono">{j.entrypoint}</dd>
        {j.driver_exit_code !== null && j.driver_exit_code !== undefined && (
          <>
            <dt>Exit code</dt>
            <dd data-testid="job-exit-code">{j.driver_exit_code}</dd>
          </>
        )}
        {j.error_type && (
          <>
            <dt>Error type</dt>
            <dd data-testid="job-error-type">{j.error_type}</dd>
          </>
        )}
        <dt>Driver job</dt>
        <dd class="mono">
          <span data-testid="job-driver-id">
            {driver || (ended ? "none: the entrypoint never connected to the cluster" : "not yet: the entrypoint has not called init()")}
          </span>
          {driver && (
            <span class="note">
              {" · "}
              <a href={href("tasks", { job: driver })}>its tasks</a> · <a href={href("actors", { job: driver })}>its actors</a> · <a href={href("events", { job: driver })}>its events</a>
            </span>
          )}
        </dd>
        <dt>Node</dt>
        <dd class="mono">
          {j.driver_node_ip || j.driver_info?.node_ip_address || "–"} {j.driver_node_id ? <a href={href("machines", { node: j.driver_node_id })}>{shortId(j.driver_node_id, 12)}</a> : ""}
        </dd>
        <dt>Entrypoint pid</dt>
        <dd>{j.driver_pid ? <WorkerLink node={j.driver_node_id} pid={j.driver_pid} /> : "–"}</dd>
        <dt>Started</dt>
        <dd>{msTime(j.start_time)}</dd>
        <dt>Ended</dt>
        <dd>{msTime(j.end_time)}</dd>
        <dt>Duration</dt>
        <dd>{duration(jobSeconds(j, now))}</dd>
        <dt>Resources</dt>
        <dd data-testid="job-resources">{entrypointResources(j)}</dd>
        <dt>Metadata</dt>
        <dd data-testid="job-metadata">{meta.length ? meta.map(([k, v]) => `${k}=${v}`).join(", ") : "none"}</dd>
        <dt>Runtime env</dt>
        <dd data-testid="job-runtime-env">{env ? <pre>{JSON.stringify(env, null, 2)}</pre> : "none"}</dd>
      </dl>
      <div class="actions">
        {/* A driver started by hand is not the Jobs API's to stop or delete (as in Ray). */}
        {j.type === "SUBMISSION" && (
          <>
            <button class="danger" disabled={ended || !!busy} onClick={() => setConfirm("stop")} data-testid="job-stop" title={ended ? "The job has ended" : "Stop the job"}>
              Stop
            </button>
            <button disabled={!ended || !!busy} onClick={() => setConfirm("delete")} data-testid="job-delete" title={ended ? "Delete the job's record" : "Only an ended job can be deleted"}>
              Delete
            </button>
          </>
        )}
        {driver && (
          <>
            <a href={href("tasks", { job: driver })} data-testid="job-tasks-link">
              tasks
            </a>
            <a href={href("actors", { job: driver })} data-testid="job-actors-link">
              actors
            </a>
          </>
        )}
      </div>
      {busy && <div class="note">{busy}…</div>}
      {note && (
        <div class="note" data-testid="job-action-result">
          {note}
        </div>
      )}
      <ErrorBox error={err} />
      {driver && <JobTasks driver={driver} ended={ended} />}
      <JobLogs key={jobKey(j)} id={jobKey(j)} ended={ended} node={j.driver_node_id} file={j.log_name} />
      {confirm && (
        <Modal title={confirm === "stop" ? "Stop this job?" : "Delete this job?"} onClose={() => setConfirm(null)}>
          <p>
            {confirm === "stop"
              ? "The entrypoint's process group gets SIGTERM, then SIGKILL after a few seconds; the job ends STOPPED."
              : "The job's record is removed from the cluster; it leaves this list."}{" "}
            Job <span class="mono">{jobKey(j)}</span>.
          </p>
          <div class="actions">
            <button onClick={() => setConfirm(null)}>Cancel</button>
            <button class="danger" onClick={confirm === "stop" ? stop : del} data-testid={`confirm-${confirm}`}>
              {confirm === "stop" ? "Stop the job" : "Delete the job"}
            </button>
          </div>
        </Modal>
      )}
    </div>
  );
}

/** The per-function progress of the driver's tasks. */
function JobTasks({ driver, ended }: { driver: string; ended: boolean }) {
  const s = useApi<TaskSummary>("api/tasks/summary", { job_id: driver }, { liveTypes: ["tasks"], minGapMs: 1000, pollMs: ended ? undefined : 5000 });
  const fns = s.data?.by_function ?? [];
  return (
    <>
      <h2>Tasks</h2>
      <ErrorBox error={s.error} />
      {s.data && fns.length === 0 ? (
        <div class="note">No tasks of this job.</div>
      ) : (
        <>
          <BarLegend />
          <table class="table" data-testid="job-task-summary" style={{ marginTop: "6px" }}>
            <tbody>
              {fns.slice(0, 20).map((f) => {
                const b = taskBuckets(f.states);
                return (
                  <tr key={f.name} data-function={f.name}>
                    <td>
                      <a href={href("tasks", { job: driver, name: f.name })}>{f.name || "(unnamed)"}</a>
                    </td>
                    <td style={{ width: "40%" }}>
                      <ProgressBar parts={b} total={f.total} />
                    </td>
                    <td class="num" data-testid="job-task-done">
                      {b.finished}/{f.total}
                    </td>
                    <td class="num">{b.failed ? `${b.failed} failed` : ""}</td>
                  </tr>
                );
              })}
            </tbody>
          </table>
          {fns.length > 20 && <div class="note">{fns.length - 20} more functions on the Tasks page.</div>}
        </>
      )}
    </>
  );
}

interface LogBuf {
  lines: string[];
  dropped: number;
}

/** `b` with `more` lines added (or in place of its lines), keeping the last MAX_LINES. */
export function boundedLines(b: LogBuf, more: string[], replace = false): LogBuf {
  const all = replace ? more : b.lines.concat(more);
  const base = replace ? 0 : b.dropped;
  const over = all.length - MAX_LINES;
  return over > 0 ? { lines: all.slice(over), dropped: base + over } : { lines: all, dropped: base };
}

function splitLines(text: string): string[] {
  if (!text) return [];
  return (text.endsWith("\n") ? text.slice(0, -1) : text).split("\n");
}

/**
 * The job's output: while it runs, the tail WebSocket's lines as they are written (polling the
 * log's end every 2 s if the WebSocket does not open); opened after the job ended, the log's end.
 */
function JobLogs({ id, ended, node, file }: { id: string; ended: boolean; node: string | null; file: string | null }) {
  const [buf, setBuf] = useState<LogBuf>({ lines: [], dropped: 0 });
  const [source, setSource] = useState("");
  const [err, setErr] = useState<string | undefined>();
  const pre = useRef<HTMLPreElement>(null);
  const stick = useRef(true); // follow the end unless the user scrolled up
  // Read by the effect, which must not restart when the job ends: a live tail still sending
  // the log's last lines would be dropped for a refetch of its end.
  const endedNow = useRef(ended);
  endedNow.current = ended;

  useEffect(() => {
    let closed = false;
    let ws: WebSocket | null = null;
    let poll = 0;
    let openTimer = 0;
    let flushTimer = 0;
    const ctl = new AbortController();
    const path = `api/jobs/${encodeURIComponent(id)}/logs`;
    // Lines the tail sent since the last render (the last MAX_LINES of them, and how many
    // were dropped): a fast log sends hundreds of messages a second, and rendering each
    // would fall ever further behind it.
    const pending: LogBuf = { lines: [], dropped: 0 };
    let flushAfter = FLUSH_MS;
    const flush = () => {
      clearTimeout(flushTimer);
      flushTimer = 0;
      if (!pending.lines.length) return;
      const { lines, dropped } = pending;
      pending.lines = [];
      pending.dropped = 0;
      setBuf((b) => boundedLines({ lines: b.lines, dropped: b.dropped + dropped }, lines));
      // The next render waits longer while the log floods.
      flushAfter = lines.length + dropped >= MAX_LINES / 2 ? FLOOD_FLUSH_MS : FLUSH_MS;
    };
    const whole = () =>
      fetchLogs(`${path}?last_bytes=${LOG_LAST_BYTES}`, ctl.signal)
        .then((r) => {
          if (closed) return;
          setBuf((b) => boundedLines(b, splitLines(r.logs), true));
          setErr(r.unavailable);
        })
        .catch((e) => {
          if (!closed) setErr(errorText(e));
        });
    const fallback = () => {
      if (closed || poll) return;
      setSource("polled every 2 s (the live tail did not connect)");
      void whole();
      poll = window.setInterval(() => {
        if (endedNow.current) clearInterval(poll); // this read is the last one needed
        void whole();
      }, POLL_MS);
    };
    if (endedNow.current) {
      setSource("the whole log");
      void whole();
    } else {
      setSource("connecting…");
      ws = new WebSocket(wsUrl(`${path}/tail?last_bytes=${LOG_LAST_BYTES}`));
      openTimer = window.setTimeout(() => {
        if (ws) ws.onclose = null;
        ws?.close();
        fallback();
      }, 5000);
      ws.onopen = () => {
        clearTimeout(openTimer);
        setSource("live");
      };
      ws.onmessage = (e) => {
        for (const line of splitLines(String(e.data))) pending.lines.push(line);
        const over = pending.lines.length - MAX_LINES;
        if (over > 0) {
          pending.lines.splice(0, over);
          pending.dropped += over;
        }
        if (!flushTimer) flushTimer = window.setTimeout(flush, flushAfter);
      };
      ws.onclose = (e) => {
        clearTimeout(openTimer);
        if (closed) return;
        flush();
        // 1000: the job ended and its last line came; its status follows on the next poll.
        if (e.code === 1000) setSource("ended");
        else fallback();
      };
    }
    return () => {
      closed = true;
      ctl.abort();
      clearTimeout(openTimer);
      clearInterval(poll);
      clearTimeout(flushTimer);
      if (ws) {
        ws.onclose = null;
        ws.onmessage = null;
        ws.close();
      }
    };
  }, [id]);

  useEffect(() => {
    const el = pre.current;
    if (el && stick.current) el.scrollTop = el.scrollHeight;
  }, [buf]);

  return (
    <>
      <h2>
        Logs <span class="note" data-testid="job-logs-source">({source})</span>
        {node && file && (
          // The whole file, however long: the page keeps only its last lines.
          <a class="note" href={apiUrl("api/logs/download", { node_id: node, name: file })} download={file} data-testid="job-log-download">
            {" "}
            download
          </a>
        )}
      </h2>
      <ErrorBox error={err} />
      {buf.dropped > 0 && (
        <div class="note" data-testid="job-logs-dropped">
          {buf.dropped.toLocaleString()} earlier lines are not shown: the page keeps the last {MAX_LINES.toLocaleString()}.
        </div>
      )}
      <pre
        ref={pre}
        class="wrap"
        data-testid="job-logs"
        data-lines={buf.lines.length}
        onScroll={(e) => {
          const el = e.currentTarget;
          stick.current = el.scrollTop + el.clientHeight >= el.scrollHeight - 20;
        }}
      >
        {buf.lines.length ? buf.lines.join("\n") : <span class="note">No output yet.</span>}
      </pre>
    </>
  );
}

/** The whole log (GET, Ray's `{"logs"}`), and why it is empty when its node does not answer
 * (the `X-Ember-Logs-Unavailable` header: a dead node's log cannot be read). */
async function fetchLogs(path: string, signal: AbortSignal): Promise<{ logs: string; unavailable?: string }> {
  const { body, headers } = await getJSONAndHeaders<{ logs: string }>(path, signal, 60_000);
  return { logs: body.logs, unavailable: headers.get("X-Ember-Logs-Unavailable") ?? undefined };
}
