// Logs: browse every node's files by component and worker, read the tail, follow it live,
// search (this file, highlighted; or every file of the node, on the server) and download.
import type { ComponentChild } from "preact";
import { useEffect, useMemo, useRef, useState } from "preact/hooks";
import { ErrorBox, NodeSelect, SearchBox, workerLabel } from "../components/bits";
import { apiUrl, errorText, getJSON, type Page } from "../lib/api";
import { useApi } from "../lib/data";
import { bytes, logLine, shortId } from "../lib/format";
import { href, parseHash, setParams } from "../lib/router";
import type { LogFile, WorkerRow } from "../lib/types";

const MAX_LINES = 20_000; // lines kept in the page while following; older ones are dropped

export function highlight(line: string, needle: string): ComponentChild {
  if (!needle) return line;
  const out: ComponentChild[] = [];
  const lower = line.toLowerCase();
  const n = needle.toLowerCase();
  let i = 0;
  for (let j = lower.indexOf(n); j >= 0; j = lower.indexOf(n, i)) {
    out.push(line.slice(i, j), <mark>{line.slice(j, j + n.length)}</mark>);
    i = j + n.length;
  }
  out.push(line.slice(i));
  return out;
}

export function Logs({ params }: { params: URLSearchParams }) {
  const node = params.get("node") ?? "";
  const file = params.get("file") ?? "";
  const pid = params.get("pid") ?? "";
  const q = params.get("q") ?? "";
  const component = params.get("component") ?? "";
  const filters = [node && `node_id=${node}`, pid && `pid=${pid}`, component && `component=${component}`].filter(Boolean) as string[];
  const files = useApi<Page<LogFile>>("api/logs", { filter: filters, limit: 2000 }, { pollMs: 10_000 });
  // The worker picker's choices: every process with files on the chosen node (and component),
  // whichever one is picked; without a pick that is the list above, so no second request.
  const procFilters = [node && `node_id=${node}`, component && `component=${component}`].filter(Boolean) as string[];
  const procFiles = useApi<Page<LogFile>>(pid ? "api/logs" : null, { filter: procFilters, limit: 2000 }, { pollMs: 10_000 });
  const procs = useMemo(() => {
    const seen = new Map<string, LogFile>();
    for (const f of (pid ? procFiles.data : files.data)?.items ?? []) {
      if (f.pid) seen.set(`${f.node_id}/${f.pid}`, f);
    }
    return [...seen.entries()].sort(([, a], [, b]) => (a.component ?? "").localeCompare(b.component ?? "") || (a.pid ?? 0) - (b.pid ?? 0));
  }, [pid, procFiles.data, files.data]);
  const procKey = pid ? `${node}/${pid}` : "";
  // What each process is (kind, actor class, current task) for the picker's labels.
  const workers = useApi<Page<WorkerRow>>("api/workers", { filter: node ? [`node_id=${node}`] : [], limit: 10_000 }, { liveTypes: ["node_metrics"], minGapMs: 5000 });
  const workerOf = useMemo(() => new Map((workers.data?.items ?? []).map((w) => [`${w.node_id}/${w.pid}`, w])), [workers.data]);

  // The files grouped by node, then component.
  const groups = useMemo(() => {
    const g = new Map<string, Map<string, LogFile[]>>();
    for (const f of files.data?.items ?? []) {
      const byComp = g.get(f.node_id) ?? new Map();
      g.set(f.node_id, byComp);
      const c = f.component ?? "other";
      byComp.set(c, [...(byComp.get(c) ?? []), f]);
    }
    return g;
  }, [files.data]);

  // Opening a worker's logs from elsewhere (?pid=) picks its first file.
  useEffect(() => {
    if (!file && pid && files.data?.items.length) {
      const f = files.data.items.find((x) => x.stream === "err") ?? files.data.items[0];
      setParams({ node: f.node_id, file: f.name });
    }
  }, [file, pid, files.data]);

  return (
    <div>
      <h1>Logs</h1>
      <div class="toolbar">
        <label>
          Component
          <select value={component} onChange={(e) => setParams({ component: (e.currentTarget as HTMLSelectElement).value || undefined })} data-testid="log-component">
            <option value="">any</option>
            {["worker", "driver", "raylet", "gcs_server", "agent", "dashboard", "zygote"].map((c) => (
              <option key={c} value={c}>
                {c}
              </option>
            ))}
          </select>
        </label>
        <NodeSelect value={node} onChange={(v) => setParams({ node: v, pid: undefined, file: undefined })} testId="log-node" />
        <label>
          Worker
          <select
            value={procKey}
            onChange={(e) => {
              const v = (e.currentTarget as HTMLSelectElement).value;
              const [nid, p] = v ? v.split("/") : [node, ""];
              setParams({ node: nid || undefined, pid: p || undefined, file: undefined });
            }}
            data-testid="log-worker"
          >
            <option value="">any</option>
            {procs.map(([k, f]) => (
              <option key={k} value={k}>
                {workerOf.has(k) ? workerLabel(workerOf.get(k)!) : `${f.component ?? "process"} pid ${f.pid}`}
                {node ? "" : ` · node ${shortId(f.node_id)}`}
              </option>
            ))}
            {procKey && !procs.some(([k]) => k === procKey) && <option value={procKey}>pid {pid}</option>}
          </select>
        </label>
        {(pid || node) && (
          <button onClick={() => setParams({ pid: undefined, node: undefined, file: undefined })} title="show every node's files">
            clear
          </button>
        )}
        <span class="count">{files.data ? `${files.data.total} files` : ""}</span>
      </div>
      <ErrorBox error={files.error} />
      <div class="logs-layout">
        <div class="loglist card" data-testid="log-files">
          {[...groups.entries()].map(([nid, comps]) => (
            <div key={nid}>
              <h3>node {shortId(nid, 12)}</h3>
              {[...comps.entries()].map(([c, list]) => (
                <div key={c}>
                  <div class="note">{c}</div>
                  {list.map((f) => (
                    <a
                      key={f.name}
                      href={href("logs", { node: nid, file: f.name, pid: pid || undefined, component: component || undefined, q: q || undefined })}
                      class={file === f.name && node === nid ? "active" : ""}
                      title={`${f.name} · ${bytes(f.size)}`}
                      data-log-file={f.name}
                      data-pid={f.pid ?? ""}
                    >
                      {f.name} <span class="note">{bytes(f.size)}</span>
                    </a>
                  ))}
                </div>
              ))}
            </div>
          ))}
          {files.data && files.data.items.length === 0 && <div class="empty">No log files.</div>}
        </div>
        <div>{file && node ? <LogView node={node} file={file} q={q} /> : <div class="empty">Pick a file on the left.</div>}</div>
      </div>
    </div>
  );
}

function LogView({ node, file, q }: { node: string; file: string; q: string }) {
  const [lines, setLines] = useState<string[]>([]);
  const [dropped, setDropped] = useState(0);
  const [follow, setFollow] = useState(true);
  const [err, setErr] = useState<string | undefined>();
  const [notice, setNotice] = useState<string | undefined>();
  const [matches, setMatches] = useState<{ name: string; line_no: number; line: string }[] | undefined>();
  const box = useRef<HTMLDivElement>(null);
  const stick = useRef(true);

  const append = (more: string[]) => {
    setLines((old) => {
      const all = old.concat(more);
      if (all.length > MAX_LINES) {
        setDropped((d) => d + all.length - MAX_LINES);
        return all.slice(all.length - MAX_LINES);
      }
      return all;
    });
  };

  useEffect(() => {
    setLines([]);
    setDropped(0);
    setErr(undefined);
    setNotice(undefined);
    if (!follow) {
      const ctl = new AbortController();
      getJSON<{ lines: string[] }>("api/logs/tail", { node_id: node, name: file, lines: 2000 }, ctl.signal)
        .then((r) => setLines(r.lines.map(logLine)))
        .catch((e) => !ctl.signal.aborted && setErr(errorText(e)));
      return () => ctl.abort();
    }
    // Following: server-sent events; EventSource reconnects by itself after a drop.
    const es = new EventSource(apiUrl("api/logs/follow", { node_id: node, name: file, lines: 2000 }));
    let first = true;
    es.onmessage = (ev) => {
      const d = JSON.parse(ev.data) as { lines?: string[] };
      if (first) {
        // A reconnect starts again from the tail: replace, do not duplicate.
        first = false;
        setLines((d.lines ?? []).map(logLine));
      } else append((d.lines ?? []).map(logLine));
      setNotice(undefined);
    };
    es.addEventListener("missing", (ev) => setNotice(`The file is unavailable: ${JSON.parse((ev as MessageEvent).data).message}`));
    es.addEventListener("rotated", () => setNotice("The file was truncated or rotated; following the new content."));
    es.onerror = () => {
      first = true;
      setNotice("The follow stream was interrupted; reconnecting…");
    };
    return () => es.close();
  }, [node, file, follow]);

  // Keep the view at the bottom while the user has not scrolled up.
  useEffect(() => {
    const el = box.current;
    if (el && stick.current) el.scrollTop = el.scrollHeight;
  }, [lines]);

  const serverSearch = async () => {
    if (!q) return;
    try {
      setMatches((await getJSON<{ matches: { name: string; line_no: number; line: string }[] }>("api/logs/search", { node_id: node, pattern: q, max_matches: 500 }, undefined, 35_000)).matches);
    } catch (e) {
      setErr(errorText(e));
    }
  };

  const hits = q ? lines.reduce((n, l) => n + (l.toLowerCase().includes(q.toLowerCase()) ? 1 : 0), 0) : 0;
  return (
    <div data-testid="log-view" data-file={file}>
      <div class="toolbar">
        <b class="mono">{file}</b>
        <SearchBox value={q} placeholder="Search (highlights)" onChange={(v) => setParams({ q: v || undefined })} testId="log-search" />
        {q && <span class="note" data-testid="log-hits">{hits} matching lines here</span>}
        <button onClick={serverSearch} disabled={!q} data-testid="log-search-all">
          Search all files of this node
        </button>
        <label>
          <input type="checkbox" checked={follow} onChange={(e) => setFollow((e.currentTarget as HTMLInputElement).checked)} data-testid="log-follow" />
          follow
        </label>
        <a href={apiUrl("api/logs/download", { node_id: node, name: file })} download={file} data-testid="log-download">
          ⤓ Download
        </a>
      </div>
      <ErrorBox error={err} />
      {notice && <div class="note">{notice}</div>}
      {dropped > 0 && <div class="note">{dropped} older lines were dropped from this view (keeps the last {MAX_LINES}); download the file for all of it.</div>}
      {matches && (
        <div class="card" data-testid="log-matches">
          <div class="note">
            {matches.length} matches across the node's files <button onClick={() => setMatches(undefined)}>close</button>
          </div>
          <pre>
            {matches.map((m) => [
              // A match opens its file (the other filters stay).
              <a href={href("logs", { ...Object.fromEntries(parseHash().params), file: m.name })} data-log-match={m.name}>
                {m.name}:{m.line_no}
              </a>,
              ": ",
              highlight(logLine(m.line), q),
              "\n",
            ])}
          </pre>
        </div>
      )}
      <div
        class="logview"
        ref={box}
        data-testid="log-lines"
        onScroll={(e) => {
          const el = e.currentTarget as HTMLDivElement;
          stick.current = el.scrollHeight - el.scrollTop - el.clientHeight < 30;
        }}
      >
        {lines.map((l, i) => [highlight(l, q), i < lines.length - 1 ? "\n" : ""])}
      </div>
    </div>
  );
}
