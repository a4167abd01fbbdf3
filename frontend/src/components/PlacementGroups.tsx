// The cluster's placement groups (GET /api/placement_groups): each group's state, strategy and
// bundles with the node each is reserved on; a pending group says why it is not placed.
import { useApi } from "../lib/data";
import { resources } from "../lib/format";
import type { Page } from "../lib/api";
import type { PlacementGroupRow } from "../lib/types";
import { ErrorBox, StateBadge } from "./bits";
import { JobLink, NodeLink } from "./links";

/** `pg`: only that group (a link from elsewhere lands on it). */
export function PlacementGroups({ job, pg }: { job?: string; pg?: string }) {
  const filter = [job && `job_id=${job}`, pg && `placement_group_id=${pg}`].filter(Boolean) as string[];
  const pgs = useApi<Page<PlacementGroupRow>>("api/placement_groups", { limit: 500, sort_by: "created_at", filter }, { pollMs: 2000 });
  const rows = pgs.data?.items ?? [];
  if (!rows.length && !pgs.error) return null;
  return (
    <div class="card" data-testid="placement-groups">
      <h2>
        Placement groups <span class="note">{pgs.data ? `${pgs.data.total.toLocaleString()}` : ""}</span>
      </h2>
      <ErrorBox error={pgs.error} />
      <table class="table">
        <thead>
          <tr>
            <th>Placement group</th>
            <th>State</th>
            <th>Strategy</th>
            <th>Bundles</th>
            <th>Job</th>
          </tr>
        </thead>
        <tbody>
          {rows.map((p) => (
            <tr key={p.placement_group_id} data-testid="pg-row" data-pg-id={p.placement_group_id} data-state={p.state}>
              <td>
                {p.name && <b>{p.name} </b>}
                <span class="mono note">{p.placement_group_id}</span>
                {p.pending_reason && <div class="reason">{p.pending_reason}</div>}
              </td>
              <td>
                <StateBadge state={p.state} />
              </td>
              <td>
                {p.strategy}
                {p.detached ? <span class="note"> · detached</span> : null}
              </td>
              <td>
                {p.bundles.map((b) => (
                  <div key={b.index} data-testid="pg-bundle">
                    #{b.index} {resources(b.resources)} <span class="note">{b.node_id ? <>on <NodeLink id={b.node_id} /></> : "not placed"}</span>
                  </div>
                ))}
              </td>
              <td>
                <JobLink id={p.job_id} />
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}
