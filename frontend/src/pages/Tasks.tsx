// Tasks: a per-function summary with Dask-style progress bars, and the task table filtered on
// the server by state, function, node and job (virtualised: 100,000 tasks scroll smoothly);
// selecting a task shows its phases and, for a failed one, its traceback.
import { useCallback, useState } from "preact/hooks";
import { VirtualTable, type Column } from "../components/VirtualTable";
import { BarLegend, ErrorBox, NodeSelect, ProgressBar, StateBadge, taskBuckets } from "../components/bits";
import { ActorLink, GroupLink, JobLink, NodeLink, TaskLink, WorkerLink } from "../components/links";
import { getJSON, type Page } from "../lib/api";
import { useApi, useLiveToken } from "../lib/data";
import { duration, time } from "../lib/format";
import { href, setParams } from "../lib/router";
import type { TaskDetail as TaskDetailRow, TaskRow, TaskSummary } from "../lib/types";

const STATES = ["", "PENDING_ARGS_AVAIL", "PENDING_NODE_ASSIGNMENT", "SUBMITTED_TO_WORKER", "RUNNING", "RETRYING", "FINISHED", "FAILED"];

export function Tasks({ params }: { params: URLSearchParams }) {
  const state = params.get("state") ?? "";
  const name = params.get("name") ?? "";
  const node = params.get("node") ?? "";
  const job = params.get("job") ?? "";
  const pid = params.get("pid") ?? "";
  const sel = params.get("sel") ?? "";
  const sortBy = params.get("sort") ?? "";
  const desc = params.get("desc") === "1";
  const summary = useApi<TaskSummary>("api/tasks/summary", {}, { liveTypes: ["tasks"], minGapMs: 1000 });
  const [total, setTotal] = useState<number | undefined>();
  const refresh = useLiveToken(["tasks"]);

  const filters = [state && `state=${state}`, name && `name=${name}`, node && `node_id=${node}`, job && `job_id=${job}`, pid && `pid=${pid}`].filter(Boolean) as string[];
  const queryKey = JSON.stringify([filters, sortBy, desc]);
  const fetchPage = useCallback(
    (offset: number, limit: number, signal: AbortSignal) =>
      getJSON<Page<TaskRow>>("api/tasks", { filter: filters, offset, limit, sort_by: sortBy || undefined, descending: desc || undefined }, signal),
    // eslint-disable-next-line react-hooks/exhaustive-deps
    [queryKey],
  );
  // Beside an open detail the table has about half the width: the columns the detail repeats
  // (times, the error) step aside, so the function's name keeps room to be read instead of
  // collapsing to a few letters; the id stays whole, and each attempt keeps its node and pid.
  const narrow = !!sel;
  const wide: Column<TaskRow>[] = [
    { key: "name", title: "Function", width: "minmax(140px, 1.6fr)", sortable: true },
    { key: "state", title: "State", width: "170px", sortable: true, render: (t) => <StateBadge state={t.state} /> },
    // Whole: a task id starts with its submitter's random prefix, the same on every row it submitted.
    { key: "task_id", title: "Task", width: "280px", render: (t) => <span class="mono">{t.task_id}</span> },
    { key: "node_id", title: "Node", width: "100px", sortable: true, render: (t) => <NodeLink id={t.node_id} /> },
    { key: "pid", title: "PID", width: "70px", align: "right", sortable: true, render: (t) => <WorkerLink node={t.node_id} pid={t.pid} /> },
    { key: "submitted_time", title: "Submitted", width: "100px", sortable: true, render: (t) => time(t.submitted_time) },
    { key: "duration_s", title: "Duration", width: "90px", align: "right", sortable: true, render: (t) => duration(t.duration_s) },
    { key: "attempt", title: "Attempt", width: "70px", align: "right", sortable: true },
    { key: "error", title: "Error", width: "minmax(80px, 1.4fr)", render: (t) => (t.error ? <span class="reason" style={{ color: "var(--bad-fg)" }}>{t.error.trim().split("\n").pop()}</span> : "") },
  ];
  const cols: Column<TaskRow>[] = narrow
    ? wide.filter((c) => !["submitted_time", "duration_s", "error"].includes(c.key)).map((c) => (c.key === "state" ? { ...c, width: "150px" } : c))
    : wide;

  return (
    <div>
      <h1>Tasks</h1>
      <h2>By function</h2>
      <ErrorBox error={summary.error} />
      <BarLegend />
      <table class="table" data-testid="task-summary" style={{ marginTop: "6px" }}>
        <thead>
          <tr>
            <th>Function</th>
            <th style={{ width: "45%" }}>Progress</th>
            <th class="num">Finished</th>
            <th class="num">Running</th>
            <th class="num">Pending</th>
            <th class="num">Failed</th>
            <th class="num">Total</th>
          </tr>
        </thead>
        <tbody>
          {(summary.data?.by_function ?? []).slice(0, 50).map((f) => {
            const b = taskBuckets(f.states);
            return (
              <tr key={f.name} class={`clickable ${name === f.name ? "selected" : ""}`} data-function={f.name} onClick={() => setParams({ name: name === f.name ? undefined : f.name })}>
                <td>{f.name || "(unnamed)"}</td>
                <td>
                  <ProgressBar parts={b} total={f.total} />
                </td>
                <td class="num">{b.finished}</td>
                <td class="num">{b.running}</td>
                <td class="num">{b.pending}</td>
                <td class="num">{b.failed}</td>
                <td class="num">{f.total}</td>
              </tr>
            );
          })}
        </tbody>
      </table>
      {summary.data && summary.data.dropped > 0 && <div class="note">{summary.data.dropped} old tasks were dropped past the dashboard's cap.</div>}
      <h2>Tasks</h2>
      <div class="toolbar">
        <label>
          State
          <select value={state} onChange={(e) => setParams({ state: (e.currentTarget as HTMLSelectElement).value || undefined })} data-testid="task-state">
            {STATES.map((s) => (
              <option key={s} value={s}>
                {s ? `${s} (${summary.data?.by_state[s] ?? 0})` : "any"}
              </option>
            ))}
          </select>
        </label>
        <label>
          Function
          <select value={name} onChange={(e) => setParams({ name: (e.currentTarget as HTMLSelectElement).value || undefined })} data-testid="task-function">
            <option value="">any</option>
            {(summary.data?.by_function ?? []).map((f) => (
              <option key={f.name} value={f.name}>
                {f.name}
              </option>
            ))}
            {name && !summary.data?.by_function.some((f) => f.name === name) && <option value={name}>{name}</option>}
          </select>
        </label>
        <NodeSelect value={node} onChange={(v) => setParams({ node: v })} testId="task-node" />
        <label>
          Job
          <input value={job} placeholder="job id" size={10} onChange={(e) => setParams({ job: (e.currentTarget as HTMLInputElement).value || undefined })} data-testid="task-job" />
        </label>
        {pid && (
          <span>
            pid {pid} <button onClick={() => setParams({ pid: undefined })}>×</button>
          </span>
        )}
        <span class="count" data-testid="task-count">
          {total === undefined ? "…" : `${total.toLocaleString()} tasks`}
        </span>
      </div>
      <div class={sel ? "split" : ""}>
        <VirtualTable
          columns={cols}
          fetchPage={fetchPage}
          queryKey={queryKey}
          refreshToken={refresh}
          rowKey={rowKey}
          rowClass={(t) => (t.state === "FAILED" ? "row-infeasible" : "")}
          onRowClick={(t) => setParams({ sel: attemptKey(t) === sel ? undefined : attemptKey(t) })}
          selected={sel?.endsWith(":0") ? sel.slice(0, -2) : sel}
          sort={sortBy ? { by: sortBy, desc } : undefined}
          onSort={(by) => setParams({ sort: by, desc: by === sortBy && !desc ? "1" : undefined })}
          onTotal={setTotal}
          height={Math.max(300, window.innerHeight - 260)}
          testId="tasks-table"
        />
        {sel && <TaskDetail sel={sel} onAttempt={(key) => setParams({ sel: key })} logStream={params.get("log") === "err" ? "err" : "out"} />}
      </div>
    </div>
  );
}

// Each attempt of a task is a row of its own (where that attempt ran): a row is selected as
// "task_id:attempt"; a bare task id (a link from another page) selects its newest attempt.
// A first attempt's row key is the bare id, as before attempts had rows of their own.
function attemptKey(t: { task_id: string; attempt: number }): string {
  return `${t.task_id}:${t.attempt}`;
}

function rowKey(t: { task_id: string; attempt: number }): string {
  return t.attempt ? attemptKey(t) : t.task_id;
}

function TaskDetail({ sel, onAttempt, logStream }: { sel: string; onAttempt: (key: string) => void; logStream: "out" | "err" }) {
  const [id, attempt] = sel.split(":");
  const d = useApi<TaskDetailRow>(`api/tasks/${encodeURIComponent(id)}`, attempt ? { attempt } : {}, {
    liveTypes: ["tasks"],
    minGapMs: 1000,
  });
  if (d.error) return <div class="card detail"><ErrorBox error={d.error} /></div>;
  const t = d.data;
  if (!t) return <div class="card detail">Loading…</div>;
  const t0 = t.events?.[0]?.time;
  return (
    <div class="card detail" data-testid="task-detail">
      <h2>
        {t.name} <StateBadge state={t.state} />
      </h2>
      <dl>
        <dt>Task id</dt>
        <dd class="mono">{t.task_id}</dd>
        <dt>Type</dt>
        <dd>{t.type}</dd>
        <dt>Job</dt>
        <dd>
          <JobLink id={t.job_id} />
          {t.job_id && (
            <>
              {" "}
              · <a href={href("tasks", { job: t.job_id })}>its tasks</a>
            </>
          )}
        </dd>
        <dt>Node / pid</dt>
        <dd>
          <NodeLink id={t.node_id} len={12} /> / <WorkerLink node={t.node_id} pid={t.pid} />
        </dd>
        {t.actor_id && (
          <>
            <dt>Actor</dt>
            <dd>
              <ActorLink id={t.actor_id} len={32} />
            </dd>
          </>
        )}
        {t.placement_group_id && (
          <>
            <dt>Placement group</dt>
            <dd>
              <GroupLink id={t.placement_group_id} />
            </dd>
          </>
        )}
        <dt>Parent task</dt>
        <dd>{t.parent_task_id ? <TaskLink id={t.parent_task_id} /> : "the driver"}</dd>
        <dt>Attempt</dt>
        <dd>{t.attempt ?? 0}</dd>
        <dt>Duration</dt>
        <dd>{duration(t.duration_s)}</dd>
      </dl>
      {(t.attempts ?? []).length > 1 && (
        <>
          <h2>Attempts</h2>
          <table class="table" data-testid="task-attempts">
            <thead>
              <tr>
                <th class="num">#</th>
                <th>State</th>
                <th>Node</th>
                <th class="num">PID</th>
                <th>Worker</th>
                <th>Started</th>
                <th>Ended</th>
              </tr>
            </thead>
            <tbody>
              {(t.attempts ?? []).map((a) => (
                <tr
                  key={a.attempt}
                  class={`clickable ${a.attempt === t.attempt ? "selected" : ""}`}
                  data-testid="task-attempt"
                  onClick={() => onAttempt(`${t.task_id}:${a.attempt}`)}
                >
                  <td class="num">{a.attempt}</td>
                  <td>
                    <StateBadge state={a.state} />
                  </td>
                  <td class="mono">
                    <NodeLink id={a.node_id} len={12} />
                  </td>
                  <td class="num">
                    <WorkerLink node={a.node_id} pid={a.pid} />
                  </td>
                  <td class="mono">{a.worker_id ? a.worker_id.slice(0, 12) : "–"}</td>
                  <td>{time(a.start_time)}</td>
                  <td>{time(a.end_time)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </>
      )}
      <TaskLog task={t} stream={logStream} />
      <h2>Phases</h2>
      <table class="table">
        <tbody>
          {(t.events ?? []).map((e) => (
            <tr key={e.state}>
              <td>{e.state}</td>
              <td>{time(e.time)}</td>
              <td class="num">+{duration(e.time - (t0 ?? e.time))}</td>
            </tr>
          ))}
        </tbody>
      </table>
      {t.error && (
        <>
          <h2>Traceback</h2>
          <pre data-testid="task-traceback">{t.error}</pre>
        </>
      )}
    </div>
  );
}

interface TaskLogReply {
  file: string;
  node_id: string | null;
  pid: number | null;
  attempt: number;
  start: number | null;
  end: number | null;
  text: string;
  left_out: number;
  note?: string;
}

/** The lines this task printed (its attempt's bytes of its worker's .out or .err file). */
function TaskLog({ task, stream }: { task: TaskDetailRow; stream: "out" | "err" }) {
  const ran = !!task.task_log_info;
  const log = useApi<TaskLogReply>(ran ? `api/tasks/${encodeURIComponent(task.task_id)}/log` : null, { stream, attempt: String(task.attempt ?? 0), state: task.state });
  const r = log.data;
  return (
    <div data-testid="task-log-panel">
      <h2>
        Log{" "}
        {(["out", "err"] as const).map((s) => (
          <button key={s} class={s === stream ? "active" : ""} onClick={() => setParams({ log: s === "out" ? undefined : s })} data-testid={`task-log-${s}`}>
            {s === "out" ? "stdout" : "stderr"}
          </button>
        ))}
      </h2>
      {!ran && <div class="note">It has not run on a worker yet.</div>}
      <ErrorBox error={log.error} />
      {r && (
        <>
          <div class="note">
            {r.note
              ? `Its own lines are not known: ${r.note}.`
              : r.end !== null && r.start !== null
                ? `${(r.end - r.start).toLocaleString()} bytes of ${r.file}, attempt ${r.attempt}`
                : task.state === "FINISHED" || task.state === "FAILED"
                  ? `its worker died during it: ${r.file} from where it started to its end, attempt ${r.attempt}`
                  : `its lines so far, from ${r.file}, attempt ${r.attempt}`}{" "}
            · <a href={href("logs", { node: r.node_id ?? undefined, pid: r.pid ? String(r.pid) : undefined })} data-testid="worker-log-link">its worker's whole log</a>
          </div>
          {r.text ? <pre data-testid="task-log">{r.text}</pre> : !r.note && <div class="note" data-testid="task-log-empty">It printed nothing to {stream === "out" ? "stdout" : "stderr"}.</div>}
          {r.left_out > 0 && <div class="note">The last {r.left_out.toLocaleString()} bytes are left out here; the worker's log has them.</div>}
        </>
      )}
    </div>
  );
}
