// Every id on a page is a link to the view that shows it (no dead ends): a job to the Jobs
// page, a node to its row on Machines, a worker (node + pid) to its logs, an actor or a task
// to its detail. Links inside clickable rows do not also click the row; a link's title is the
// whole id (the text may be its start).
import { href } from "../lib/router";
import { shortId } from "../lib/format";

const stop = (e: MouseEvent) => e.stopPropagation();

function IdLink(p: { page: string; params: Record<string, string | undefined>; text: string; title?: string; testId?: string }) {
  return (
    <a class="mono" href={href(p.page, p.params)} onClick={stop} title={p.title} data-testid={p.testId}>
      {p.text}
    </a>
  );
}

export function JobLink({ id }: { id: string | null | undefined }) {
  return id ? <IdLink page="jobs" params={{ sel: id }} text={id} title={id} testId="job-link" /> : <>–</>;
}

export function NodeLink({ id, len = 8 }: { id: string | null | undefined; len?: number }) {
  return id ? <IdLink page="machines" params={{ node: id }} text={shortId(id, len)} title={id} testId="node-link" /> : <>–</>;
}

/** A worker process: its logs (the Logs page, filtered to that node and pid). */
export function WorkerLink({ node, pid }: { node: string | null | undefined; pid: number | null | undefined }) {
  return pid ? <IdLink page="logs" params={{ node: node ?? undefined, pid: String(pid) }} text={String(pid)} title={`logs of pid ${pid}`} testId="worker-link" /> : <>–</>;
}

export function ActorLink({ id, len = 12 }: { id: string | null | undefined; len?: number }) {
  return id ? <IdLink page="actors" params={{ sel: id }} text={shortId(id, len)} title={id} testId="actor-link" /> : <>–</>;
}

export function TaskLink({ id, len = 32 }: { id: string | null | undefined; len?: number }) {
  return id ? <IdLink page="tasks" params={{ sel: id }} text={shortId(id, len)} title={id} testId="task-link" /> : <>–</>;
}

/** A placement group: the Actors page's groups table, filtered to it. */
export function GroupLink({ id, name }: { id: string | null | undefined; name?: string }) {
  return id ? <IdLink page="actors" params={{ pg: id }} text={name || shortId(id, 12)} title={id} testId="pg-link" /> : <>–</>;
}
