// Memory: the `ember memory` view. Every ObjectRef pinning an object, grouped by node or by
// process, sortable by any column of the reference table, with the store's use per node.
import { useCallback, useEffect, useState } from "preact/hooks";
import { Table, VirtualTable, type Column } from "../components/VirtualTable";
import { ErrorBox } from "../components/bits";
import { getJSON, type Page } from "../lib/api";
import { useApi } from "../lib/data";
import { bytes, shortId } from "../lib/format";
import { NodeLink, WorkerLink } from "../components/links";
import { setParams } from "../lib/router";
import type { ObjectRow } from "../lib/types";

interface Group {
  key: string;
  node_id: string;
  pid: number | null;
  count: number;
  bytes: number;
  types: Record<string, number>;
}
interface Groups {
  by: string;
  groups: Group[];
  missing: Record<string, string>;
  store: Record<string, { used?: number; capacity?: number; objects?: number; spilled?: number; spilled_objects?: number; restored?: number }>;
}

const SORTABLE = new Set(["object_id", "reference_type", "object_size", "status", "node_id", "pid", "call_site"]);
const TYPES = ["", "LOCAL_REFERENCE", "PINNED_IN_MEMORY", "USED_BY_PENDING_TASK", "CAPTURED_IN_OBJECT", "ACTOR_HANDLE"];

export function Memory({ params }: { params: URLSearchParams }) {
  const by = params.get("group") === "pid" ? "pid" : "node_id";
  const sel = params.get("sel") ?? "";
  // Sorted on the server by any column header; sizes largest first unless told otherwise.
  const sort = SORTABLE.has(params.get("sort") ?? "") ? params.get("sort")! : "object_size";
  const desc = params.has("desc") ? params.get("desc") === "1" : sort === "object_size";
  const type = params.get("type") ?? "";
  const groups = useApi<Groups>("api/frontend/object_groups", { by }, { pollMs: 5000 });
  const [total, setTotal] = useState<number | undefined>();
  const [refresh, setRefresh] = useState(0);
  // References are collected from the processes on request, not announced on the stream:
  // the rows in view are refetched every 5 s (the groups above poll at the same pace).
  useEffect(() => {
    const t = setInterval(() => setRefresh((r) => r + 1), 5000);
    return () => clearInterval(t);
  }, []);

  const filters = [type && `reference_type=${type}`, sel && (by === "pid" ? `pid=${sel.split("/")[1]}` : `node_id=${sel}`), sel && by === "pid" && `node_id=${sel.split("/")[0]}`].filter(Boolean) as string[];
  const queryKey = JSON.stringify([filters, sort, desc]);
  const fetchPage = useCallback(
    (offset: number, limit: number, signal: AbortSignal) =>
      getJSON<Page<ObjectRow>>("api/objects", { filter: filters, offset, limit, sort_by: sort, descending: desc }, signal),
    // eslint-disable-next-line react-hooks/exhaustive-deps
    [queryKey],
  );

  const groupCols: Column<Group>[] = [
    { key: "key", title: by === "pid" ? "Process" : "Node", render: (g) => (by === "pid" ? <span class="mono"><NodeLink id={g.node_id} /> / pid <WorkerLink node={g.node_id} pid={g.pid} /></span> : <NodeLink id={g.node_id} len={12} />) },
    { key: "count", title: "Refs", align: "right" },
    { key: "bytes", title: "Size", align: "right", render: (g) => bytes(g.bytes) },
    { key: "types", title: "Reference types", render: (g) => Object.entries(g.types).map(([t, n]) => `${t} ${n}`).join(" · ") },
    ...(by === "node_id"
      ? [{ key: "store", title: "Object store", render: (g: Group) => { const s = groups.data?.store[g.node_id]; return s ? `${bytes(s.used)} / ${bytes(s.capacity)} · ${s.objects ?? "–"} objects` + (s.spilled || s.restored ? ` · spilled ${bytes(s.spilled)}, ${s.spilled_objects ?? 0} objects · restored ${bytes(s.restored)}` : "") : "–"; } }]
      : []),
  ];
  const cols: Column<ObjectRow>[] = [
    { key: "object_id", title: "Object", width: "1.3fr", sortable: true, render: (o) => <span class="mono">{o.object_id}</span> }, // whole: its start is the producing process's
    { key: "reference_type", title: "Reference type", width: "1.2fr", sortable: true },
    { key: "object_size", title: "Size", width: "90px", align: "right", sortable: true, render: (o) => ((o.object_size ?? -1) >= 0 ? bytes(o.object_size) : "–") },
    { key: "status", title: "Status", width: "110px", sortable: true },
    { key: "node_id", title: "Node", width: "100px", sortable: true, render: (o) => <NodeLink id={o.node_id} /> },
    { key: "pid", title: "PID", width: "70px", align: "right", sortable: true, render: (o) => <WorkerLink node={o.node_id} pid={o.pid} /> },
    { key: "call_site", title: "Call site", width: "2fr", sortable: true },
  ];

  return (
    <div>
      <h1>Memory</h1>
      <div class="toolbar">
        <label>
          Group by
          <select value={by} onChange={(e) => setParams({ group: (e.currentTarget as HTMLSelectElement).value === "pid" ? "pid" : undefined, sel: undefined })} data-testid="memory-group">
            <option value="node_id">node</option>
            <option value="pid">process</option>
          </select>
        </label>
        <label>
          Type
          <select value={type} onChange={(e) => setParams({ type: (e.currentTarget as HTMLSelectElement).value || undefined })}>
            {TYPES.map((t) => (
              <option key={t} value={t}>
                {t || "any"}
              </option>
            ))}
          </select>
        </label>
        <button onClick={() => { groups.reload(); setRefresh((r) => r + 1); }} data-testid="memory-refresh">Refresh</button>
        <span class="count" data-testid="memory-count">{total === undefined ? "" : `${total.toLocaleString()} references`}</span>
      </div>
      <ErrorBox error={groups.error} />
      {groups.data && Object.keys(groups.data.missing).length > 0 && (
        <div class="note">Not answered: {Object.entries(groups.data.missing).map(([n, why]) => `${shortId(n)}: ${why}`).join("; ")}</div>
      )}
      <Table
        columns={groupCols}
        rows={groups.data?.groups ?? []}
        rowKey={(g) => g.key}
        rowClass={(g) => (g.key === sel ? "selected" : "")}
        onRowClick={(g) => setParams({ sel: g.key === sel ? undefined : g.key })}
        testId="memory-groups"
      />
      <h2>References {sel && <button onClick={() => setParams({ sel: undefined })}>show all</button>}</h2>
      <VirtualTable
        columns={cols}
        fetchPage={fetchPage}
        queryKey={queryKey}
        refreshToken={refresh}
        rowKey={(o) => `${o.node_id}/${o.pid}/${o.object_id}/${o.reference_type}`}
        sort={{ by: sort, desc }}
        // The same column again flips the order; a new one starts ascending, sizes largest first.
        onSort={(by) => setParams({ sort: by, desc: (by === sort ? !desc : by === "object_size") ? "1" : "0" })}
        onTotal={setTotal}
        height={420}
        testId="memory-table"
      />
    </div>
  );
}
