// A virtualised table over a server-paged list: only the rows in view (plus a margin) exist in
// the DOM, and only the pages of rows in view are fetched, so 20,000 actors or 100,000 tasks
// scroll as smoothly as 20. The server filters and sorts; this component never holds the list.
import type { ComponentChild } from "preact";
import { useCallback, useEffect, useLayoutEffect, useRef, useState } from "preact/hooks";
import { errorText, type Page } from "../lib/api";

export interface Column<T> {
  key: string;
  title: string;
  /** A CSS grid track, e.g. "120px" or "2fr". */
  width?: string;
  render?: (row: T) => ComponentChild;
  sortable?: boolean;
  align?: "right";
}

interface Props<T> {
  columns: Column<T>[];
  fetchPage: (offset: number, limit: number, signal: AbortSignal) => Promise<Page<T>>;
  /** Changing it (new filters, new sort) drops every cached page and scrolls to the top. */
  queryKey: string;
  /** Bumping it refetches the pages in view (live updates) without losing the scroll. */
  refreshToken?: number;
  rowKey: (row: T) => string;
  rowClass?: (row: T) => string;
  onRowClick?: (row: T) => void;
  selected?: string;
  sort?: { by: string; desc: boolean };
  onSort?: (by: string) => void;
  onTotal?: (total: number) => void;
  rowHeight?: number;
  height?: number;
  testId?: string;
}

const PAGE = 100;
const OVERSCAN = 10;

export function VirtualTable<T>(p: Props<T>) {
  const rh = p.rowHeight ?? 28;
  const height = p.height ?? 520;
  const scroller = useRef<HTMLDivElement>(null);
  const [scrollTop, setScrollTop] = useState(0);
  const [total, setTotal] = useState<number | undefined>(undefined);
  const [error, setError] = useState<string | undefined>(undefined);
  // pages: {page index: rows}; a Map in a ref plus a version counter to re-render on arrival.
  const pages = useRef(new Map<number, T[]>());
  const inflight = useRef(new Map<number, AbortController>());
  const generation = useRef(0);
  const [, setVersion] = useState(0);

  const first = Math.max(0, Math.floor(scrollTop / rh) - OVERSCAN);
  const last = Math.min(total ?? PAGE, Math.ceil((scrollTop + height) / rh) + OVERSCAN);

  const fetchPageIdx = useCallback(
    (idx: number, replace: boolean) => {
      if (inflight.current.has(idx) || (!replace && pages.current.has(idx))) return;
      const ctl = new AbortController();
      inflight.current.set(idx, ctl);
      const gen = generation.current;
      p.fetchPage(idx * PAGE, PAGE, ctl.signal)
        .then((res) => {
          if (gen !== generation.current) return;
          pages.current.set(idx, res.items);
          setTotal(res.total);
          p.onTotal?.(res.total);
          setError(undefined);
          setVersion((v) => v + 1);
        })
        .catch((e) => {
          if (!ctl.signal.aborted && gen === generation.current) setError(errorText(e));
        })
        .finally(() => {
          if (inflight.current.get(idx) === ctl) inflight.current.delete(idx);
        });
    },
    // eslint-disable-next-line react-hooks/exhaustive-deps
    [p.fetchPage],
  );

  // New query: forget everything.
  useLayoutEffect(() => {
    generation.current++;
    inflight.current.forEach((c) => c.abort());
    inflight.current.clear();
    pages.current.clear();
    setTotal(undefined);
    if (scroller.current) scroller.current.scrollTop = 0;
    setScrollTop(0);
    setVersion((v) => v + 1);
  }, [p.queryKey]);

  // Fetch whichever pages a window of rows needs (none already held or on the way).
  const ensure = (top: number) => {
    const f = Math.max(0, Math.floor(top / rh) - OVERSCAN);
    const l = Math.min(total ?? PAGE, Math.ceil((top + height) / rh) + OVERSCAN);
    for (let i = Math.floor(f / PAGE); i <= Math.floor(Math.max(f, l - 1) / PAGE); i++) fetchPageIdx(i, false);
  };
  // After every render (the first, new totals, new queries); a layout effect runs before the
  // frame is painted, so the request leaves a frame earlier than with a plain effect.
  useLayoutEffect(() => ensure(scrollTop));

  // Live refresh: refetch the pages in view, forget the others (they are stale now).
  useEffect(() => {
    if (!p.refreshToken) return;
    const a = Math.floor(first / PAGE);
    const b = Math.floor(Math.max(first, last - 1) / PAGE);
    for (const k of [...pages.current.keys()]) if (k < a || k > b) pages.current.delete(k);
    for (let i = a; i <= b; i++) fetchPageIdx(i, true);
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [p.refreshToken]);

  const grid = p.columns.map((c) => c.width ?? "1fr").join(" ");
  const rows: ComponentChild[] = [];
  const end = Math.min(last, total ?? 0);
  for (let i = first; i < end; i++) {
    const row = pages.current.get(Math.floor(i / PAGE))?.[i % PAGE];
    const style = { transform: `translateY(${i * rh}px)`, height: `${rh}px`, gridTemplateColumns: grid };
    if (!row) {
      rows.push(<div class="vrow loading" style={style} key={`i${i}`} />);
      continue;
    }
    const k = p.rowKey(row);
    rows.push(
      <div
        key={k}
        data-row-key={k}
        class={`vrow ${p.rowClass?.(row) ?? ""} ${p.selected === k ? "selected" : ""} ${p.onRowClick ? "clickable" : ""}`}
        style={style}
        onClick={() => p.onRowClick?.(row)}
      >
        {p.columns.map((c) => (
          <div class={`cell ${c.align === "right" ? "num" : ""}`} key={c.key} data-col={c.key}>
            {c.render ? c.render(row) : fmtCell((row as Record<string, unknown>)[c.key])}
          </div>
        ))}
      </div>,
    );
  }

  return (
    <div class="vtable" data-testid={p.testId} data-total={total ?? ""}>
      <div class="vhead" style={{ gridTemplateColumns: grid }}>
        {p.columns.map((c) => (
          <div
            key={c.key}
            class={`cell ${c.sortable && p.onSort ? "sortable" : ""} ${c.align === "right" ? "num" : ""}`}
            data-col={c.key}
            aria-sort={p.sort?.by === c.key ? (p.sort.desc ? "descending" : "ascending") : c.sortable ? "none" : undefined}
            onClick={() => c.sortable && p.onSort?.(c.key)}
          >
            {c.title}
            {p.sort?.by === c.key ? (p.sort.desc ? " ▼" : " ▲") : ""}
          </div>
        ))}
      </div>
      <div
        class="vbody"
        ref={scroller}
        style={{ height: `${height}px` }}
        onScroll={(e) => {
          const top = (e.currentTarget as HTMLDivElement).scrollTop;
          ensure(top); // ask for the rows now, not after the next render
          setScrollTop(top);
        }}
      >
        <div class="vspacer" style={{ height: `${(total ?? 0) * rh}px` }}>
          {rows}
        </div>
        {total === 0 && <div class="empty">No rows match.</div>}
      </div>
      {error && <div class="error">Could not load rows: {error}</div>}
    </div>
  );
}

export function fmtCell(v: unknown): ComponentChild {
  if (v === null || v === undefined || v === "") return "–";
  if (typeof v === "object") return JSON.stringify(v);
  return String(v);
}

/** A plain table for short lists (nodes, per-function summaries). */
export function Table<T>(p: {
  columns: Column<T>[];
  rows: T[];
  rowKey: (r: T) => string;
  rowClass?: (r: T) => string;
  testId?: string;
  onRowClick?: (r: T) => void;
  expanded?: (r: T) => ComponentChild | null;
}) {
  return (
    <table class="table" data-testid={p.testId}>
      <thead>
        <tr>
          {p.columns.map((c) => (
            <th key={c.key} class={c.align === "right" ? "num" : ""}>
              {c.title}
            </th>
          ))}
        </tr>
      </thead>
      <tbody>
        {p.rows.map((r) => {
          const extra = p.expanded?.(r);
          return [
            <tr
              key={p.rowKey(r)}
              data-row-key={p.rowKey(r)}
              class={`${p.rowClass?.(r) ?? ""} ${p.onRowClick ? "clickable" : ""}`}
              onClick={() => p.onRowClick?.(r)}
            >
              {p.columns.map((c) => (
                <td key={c.key} class={c.align === "right" ? "num" : ""} data-col={c.key}>
                  {c.render ? c.render(r) : fmtCell((r as Record<string, unknown>)[c.key])}
                </td>
              ))}
            </tr>,
            extra ? (
              <tr key={`${p.rowKey(r)}-x`} class="expanded">
                <td colSpan={p.columns.length}>{extra}</td>
              </tr>
            ) : null,
          ];
        })}
        {p.rows.length === 0 && (
          <tr>
            <td colSpan={p.columns.length} class="empty">
              Nothing to show.
            </td>
          </tr>
        )}
      </tbody>
    </table>
  );
}
