// The logical view: every actor, as a flat list or as the tree of creators (Parent -> Child ->
// Grandchild), paged on the server and virtualised so 20,000 actors scroll smoothly. Pending
// actors are yellow and infeasible ones red, each with its reason. Selecting one opens its
// details with Kill (confirmed), Stack and Profile (a flame graph, py-spy, no sudo).
import { useCallback, useMemo, useState } from "preact/hooks";
import { FlameGraph, type Speedscope } from "../components/FlameGraph";
import { PlacementGroups } from "../components/PlacementGroups";
import { VirtualTable, type Column } from "../components/VirtualTable";
import { ErrorBox, Modal, NodeSelect, SearchBox, StateBadge } from "../components/bits";
import { ActorLink, GroupLink, JobLink, NodeLink, WorkerLink } from "../components/links";
import { errorText, getJSON, postJSON, type Page } from "../lib/api";
import { useApi, useLiveToken } from "../lib/data";
import { resources, shortId, time } from "../lib/format";
import { href, setParams } from "../lib/router";
import type { ActorDetail as ActorDetailRow, ActorRow } from "../lib/types";

// /api/frontend/actors adds to each row how many actors it created, whether its wait is
// infeasible, and in the tree view its depth and whether it matched the filters itself.
type ActorItem = ActorRow & { num_children: number; infeasible: boolean; depth?: number; matches?: boolean };
type ActorPage = Page<ActorItem> & { counts: Record<string, number>; classes: Record<string, number>; jobs: Record<string, number> };

const STATES = ["", "ALIVE", "PENDING", "RESTARTING", "DEAD"];

/** A filter choosing one of `options` ({value: count}, from the server), or any. */
function ChoiceSelect(p: { label: string; value: string; options: Record<string, number>; onChange: (v: string | undefined) => void; testId: string }) {
  const keys = Object.keys(p.options).filter(Boolean).sort();
  return (
    <label>
      {p.label}
      <select value={p.value} onChange={(e) => p.onChange((e.currentTarget as HTMLSelectElement).value || undefined)} data-testid={p.testId}>
        <option value="">any</option>
        {keys.map((k) => (
          <option key={k} value={k}>
            {k} ({p.options[k]})
          </option>
        ))}
        {p.value && !(p.value in p.options) && <option value={p.value}>{p.value}</option>}
      </select>
    </label>
  );
}

export function actorRowClass(a: ActorItem): string {
  if (a.infeasible) return "row-infeasible";
  if (a.state === "PENDING" || a.state === "RESTARTING") return "row-pending";
  return "";
}

export function Actors({ params }: { params: URLSearchParams }) {
  const q = params.get("q") ?? "";
  const state = params.get("state") ?? "";
  const view = params.get("view") === "tree" ? "tree" : "list";
  const sel = params.get("sel") ?? "";
  const pid = params.get("pid") ?? "";
  const sortBy = params.get("sort") ?? "";
  const desc = params.get("desc") === "1";
  const collapsed = params.get("collapsed") ?? "";
  const node = params.get("node") ?? "";
  const cls = params.get("class") ?? "";
  const job = params.get("job") ?? "";
  const [total, setTotal] = useState<number | undefined>(undefined);
  // The whole table's states, classes and jobs (every page carries them): the filters' choices.
  const [choices, setChoices] = useState<Pick<ActorPage, "counts" | "classes" | "jobs">>({ counts: {}, classes: {}, jobs: {} });
  const counts = choices.counts;

  const query = { q, state, view, pid, node_id: node, class_name: cls, job_id: job, collapsed, sort_by: sortBy || undefined, descending: desc || undefined };
  const queryKey = JSON.stringify(query);
  const fetchPage = useCallback(
    async (offset: number, limit: number, signal: AbortSignal) => {
      const p = await getJSON<ActorPage>("api/frontend/actors", { ...query, offset, limit }, signal);
      setChoices({ counts: p.counts, classes: p.classes, jobs: p.jobs });
      return p;
    },
    // eslint-disable-next-line react-hooks/exhaustive-deps
    [queryKey],
  );

  // Actor state changes arrive on the stream: refetch the rows in view, at most once a second.
  const refresh = useLiveToken(["actor"]);

  const toggle = (id: string) => {
    const set = new Set(collapsed.split(",").filter(Boolean));
    if (set.has(id)) set.delete(id);
    else set.add(id);
    setParams({ collapsed: [...set].join(",") || undefined });
  };

  const cols: Column<ActorItem>[] = useMemo(
    () => [
      {
        key: "title",
        title: "Actor",
        width: "2.2fr",
        sortable: true,
        render: (a) => (
          <span style={{ paddingLeft: `${(a.depth ?? 0) * 18}px`, opacity: a.matches === false ? 0.55 : 1 }}>
            {view === "tree" && (
              <span
                class="tree-toggle"
                onClick={(e) => {
                  e.stopPropagation();
                  if (a.num_children) toggle(a.actor_id);
                }}
              >
                {a.num_children ? (collapsed.split(",").includes(a.actor_id) ? "▸" : "▾") : "·"}
              </span>
            )}
            <b>{a.title || a.class_name}</b> <span class="note mono">{shortId(a.actor_id, 10)}</span>
            {view === "tree" && a.num_children ? <span class="note"> · {a.num_children} children</span> : null}
          </span>
        ),
      },
      { key: "state", title: "State", width: "100px", sortable: true, render: (a) => <StateBadge state={a.state} /> },
      {
        key: "pending_reason",
        title: "Reason",
        width: "1.6fr",
        render: (a) =>
          a.state === "PENDING" || a.infeasible ? (
            <span class="reason" title={a.pending_reason ?? ""} data-testid="actor-reason">
              {a.pending_reason ?? "waiting to be scheduled"}
            </span>
          ) : a.state === "DEAD" ? (
            <span class="note">{a.death_cause ?? ""}</span>
          ) : (
            ""
          ),
      },
      { key: "resources", title: "Resources", width: "1fr", render: (a) => resources(a.resources) },
      { key: "pending_calls", title: "Pending", width: "70px", align: "right", sortable: true },
      { key: "executed_calls", title: "Executed", width: "80px", align: "right", sortable: true },
      // Restarts: an actor restarted twice is not plain ALIVE; its calls span its incarnations.
      { key: "num_restarts", title: "Restarts", width: "75px", align: "right", sortable: true, render: (a) => <span data-testid="actor-restarts">{a.num_restarts ?? 0}</span> },
      { key: "job_id", title: "Job", width: "90px", sortable: true, render: (a) => <JobLink id={a.job_id} /> },
      { key: "node_id", title: "Node", width: "100px", sortable: true, render: (a) => <NodeLink id={a.node_id} /> },
      { key: "pid", title: "PID", width: "70px", align: "right", sortable: true, render: (a) => <WorkerLink node={a.node_id} pid={a.pid} /> },
    ],
    // eslint-disable-next-line react-hooks/exhaustive-deps
    [view, collapsed],
  );

  return (
    <div>
      <h1>Actors</h1>
      <div class="toolbar">
        <SearchBox value={q} placeholder="Search class, name, id, node…" onChange={(v) => setParams({ q: v || undefined })} testId="actor-search" />
        <label>
          State
          <select value={state} onChange={(e) => setParams({ state: (e.currentTarget as HTMLSelectElement).value || undefined })} data-testid="actor-state">
            {STATES.map((s) => (
              <option key={s} value={s}>
                {s ? `${s} (${counts[s] ?? 0})` : "any"}
              </option>
            ))}
          </select>
        </label>
        <NodeSelect value={node} onChange={(v) => setParams({ node: v })} testId="actor-node" />
        <ChoiceSelect label="Class" value={cls} options={choices.classes} onChange={(v) => setParams({ class: v })} testId="actor-class" />
        <ChoiceSelect label="Job" value={job} options={choices.jobs} onChange={(v) => setParams({ job: v })} testId="actor-job" />
        <label>
          View
          <select value={view} onChange={(e) => setParams({ view: (e.currentTarget as HTMLSelectElement).value === "tree" ? "tree" : undefined })} data-testid="actor-view">
            <option value="list">list</option>
            <option value="tree">tree of creators</option>
          </select>
        </label>
        {pid && (
          <span>
            pid {pid} <button onClick={() => setParams({ pid: undefined })}>×</button>
          </span>
        )}
        <span class="count" data-testid="actor-count">
          {total === undefined ? "…" : `${total.toLocaleString()} actors`}
        </span>
      </div>
      <div class={sel ? "split" : ""}>
        <VirtualTable
          columns={cols}
          fetchPage={fetchPage}
          queryKey={queryKey}
          refreshToken={refresh}
          rowKey={(a) => a.actor_id}
          rowClass={actorRowClass}
          onRowClick={(a) => setParams({ sel: a.actor_id === sel ? undefined : a.actor_id })}
          selected={sel}
          sort={sortBy ? { by: sortBy, desc } : undefined}
          onSort={(by) => setParams({ sort: by, desc: by === sortBy && !desc ? "1" : undefined })}
          onTotal={setTotal}
          height={Math.max(300, window.innerHeight - 230)}
          testId="actors-table"
        />
        {sel && <ActorDetail id={sel} />}
      </div>
      <PlacementGroups job={job || undefined} pg={params.get("pg") ?? undefined} />
    </div>
  );
}

interface StackReply {
  nodes: {
    node_id: string;
    error: string | null;
    processes: { pid: number; current_task?: string; error: string | null; threads: { thread_id: number; name: string; active: boolean; frames: { function: string; file: string; line: number }[] }[] }[];
  }[];
}

function ActorDetail({ id }: { id: string }) {
  // State changes and call counts (task events) arrive on the stream.
  const d = useApi<ActorDetailRow>(`api/actors/${encodeURIComponent(id)}`, {}, { liveTypes: ["actor", "tasks"], minGapMs: 1000 });
  const [confirm, setConfirm] = useState(false);
  const [killMsg, setKillMsg] = useState<string | undefined>();
  const [stack, setStack] = useState<StackReply | undefined>();
  const [profile, setProfile] = useState<Speedscope | undefined>();
  const [busy, setBusy] = useState<string | undefined>();
  const [err, setErr] = useState<string | undefined>();
  const a = d.data;

  const run = async (what: string, f: () => Promise<void>) => {
    setBusy(what);
    setErr(undefined);
    try {
      await f();
    } catch (e) {
      setErr(`${what}: ${errorText(e)}`);
    } finally {
      setBusy(undefined);
    }
  };

  const kill = () =>
    run("Kill", async () => {
      setConfirm(false);
      const r = await postJSON<{ ok?: boolean; message?: string }>(`api/actors/${encodeURIComponent(id)}/kill`, undefined, { no_restart: true });
      setKillMsg(r.ok === false ? (r.message ?? "not killed") : "Kill sent; the actor's state follows below.");
      d.reload();
    });
  const doStack = () =>
    run("Stack", async () => {
      setStack(await getJSON<StackReply>("api/stack", { pid: a!.pid, node_id: a!.node_id }, undefined, 70_000));
    });
  const doProfile = (secs: number) =>
    run(`Profile ${secs} s`, async () => {
      setProfile(undefined);
      setProfile(await getJSON<Speedscope>("api/profile", { pid: a!.pid, node_id: a!.node_id, duration: secs, format: "speedscope" }, undefined, (secs + 40) * 1000));
    });

  if (d.error) return <div class="card detail"><ErrorBox error={d.error} /></div>;
  if (!a) return <div class="card detail">Loading…</div>;
  const alive = a.state === "ALIVE" && !!a.pid;
  return (
    <div class="card detail" data-testid="actor-detail" data-actor-id={a.actor_id} data-state={a.state}>
      <h2>
        {a.title || a.class_name} <StateBadge state={a.state} />
      </h2>
      <dl>
        <dt>Actor id</dt>
        <dd class="mono">{a.actor_id}</dd>
        <dt>Class</dt>
        <dd>{a.class_name}</dd>
        {a.name && (
          <>
            <dt>Name</dt>
            <dd>{a.name}</dd>
          </>
        )}
        <dt>Job</dt>
        <dd>
          <JobLink id={a.job_id} />
        </dd>
        <dt>Node / pid</dt>
        <dd>
          <NodeLink id={a.node_id} len={12} /> / <WorkerLink node={a.node_id} pid={a.pid} />
        </dd>
        <dt>Resources</dt>
        <dd>{resources(a.resources)}</dd>
        {a.placement_group_id && (
          <>
            <dt>Placement group</dt>
            <dd>
              <GroupLink id={a.placement_group_id} />
            </dd>
          </>
        )}
        <dt>Calls</dt>
        <dd>
          {a.pending_calls ?? 0} pending · {a.executed_calls ?? 0} executed
        </dd>
        <dt>Restarts</dt>
        <dd>{a.num_restarts ?? 0}</dd>
        <dt>Created by</dt>
        <dd>{a.creator_actor_id ? <ActorLink id={a.creator_actor_id} /> : "the driver"}</dd>
        <dt>Children</dt>
        <dd>{a.children?.length ? a.children.map((c) => <span key={c} style={{ marginRight: "6px" }}><ActorLink id={c} len={8} /></span>) : "none"}</dd>
        <dt>Started</dt>
        <dd>{time(a.start_time)}</dd>
        {a.pending_reason && (
          <>
            <dt>Pending</dt>
            <dd class="reason" data-testid="actor-pending-reason">{a.pending_reason}</dd>
          </>
        )}
        {a.death_cause && (
          <>
            <dt>Death</dt>
            <dd>{a.death_cause}</dd>
          </>
        )}
      </dl>
      {(a.incarnations ?? []).length > 0 && (
        <>
          <h2>Earlier incarnations</h2>
          <table class="table" data-testid="actor-incarnations">
            <thead>
              <tr>
                <th>Node</th>
                <th class="num">PID</th>
                <th>Started</th>
                <th>Ended</th>
                <th>Why it ended</th>
              </tr>
            </thead>
            <tbody>
              {(a.incarnations ?? []).map((life, i) => (
                <tr key={i} data-testid="actor-incarnation">
                  <td class="mono">{shortId(life.node_id, 12)}</td>
                  <td class="num">{life.pid ?? "–"}</td>
                  <td>{time(life.start_time)}</td>
                  <td>{time(life.end_time)}</td>
                  <td class="reason">{life.death_cause}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </>
      )}
      <div class="actions">
        <button class="danger" disabled={a.state === "DEAD" || !!busy} onClick={() => setConfirm(true)} data-testid="actor-kill">
          Kill
        </button>
        <button disabled={!alive || !!busy} onClick={doStack} data-testid="actor-stack">
          Stack
        </button>
        {[10, 30, 60].map((s) => (
          <button key={s} disabled={!alive || !!busy} onClick={() => doProfile(s)} data-testid={`actor-profile-${s}`}>
            Profile {s} s
          </button>
        ))}
        <a href={href("logs", { node: a.node_id ?? undefined, pid: a.pid ? String(a.pid) : undefined })}>logs</a>
        <a href={href("tasks", { name: undefined, job: a.job_id || undefined })}>its job's tasks</a>
      </div>
      {busy && <div class="note" data-testid="actor-busy">{busy}… (py-spy is recording)</div>}
      {killMsg && <div class="note" data-testid="kill-result">{killMsg}</div>}
      <ErrorBox error={err} />
      {stack && <StackView reply={stack} />}
      {profile && <FlameGraph profile={profile} />}
      {confirm && (
        <Modal title={`Kill ${a.title || a.class_name}?`} onClose={() => setConfirm(false)}>
          <p>
            The actor's process is stopped now, its pending calls fail, and it is not restarted. Actor <span class="mono">{shortId(a.actor_id, 12)}</span>.
          </p>
          <div class="actions">
            <button onClick={() => setConfirm(false)}>Cancel</button>
            <button class="danger" onClick={kill} data-testid="confirm-kill">
              Kill the actor
            </button>
          </div>
        </Modal>
      )}
    </div>
  );
}

export function StackView({ reply }: { reply: StackReply }) {
  return (
    <div data-testid="stack-view">
      {reply.nodes.map((n) => (
        <div key={n.node_id}>
          {n.error && <div class="error">{n.error}</div>}
          {n.processes.map((p) => (
            <div key={p.pid}>
              <div class="note">
                pid {p.pid} {p.current_task ? `running ${p.current_task}` : ""}
              </div>
              {p.error && <div class="error">{p.error}</div>}
              {p.threads.map((t) => (
                <pre key={t.thread_id}>
                  {`Thread ${t.thread_id} ${t.name ?? ""}${t.active ? " (active)" : " (idle)"}\n`}
                  {t.frames.map((f) => `  ${f.function} (${f.file}:${f.line})`).join("\n")}
                </pre>
              ))}
            </div>
          ))}
        </div>
      ))}
    </div>
  );
}
