// The live task stream: the Chrome trace of /api/timeline for the chosen window, drawn on a
// canvas (a row per worker grouped by node). While "follow" is on, new tasks slide in from the
// right as the stream announces them; zooming or panning stops following.
import { useEffect, useMemo, useRef, useState } from "preact/hooks";
import { ErrorBox, NodeSelect } from "../components/bits";
import { apiUrl, errorText, getJSON } from "../lib/api";
import { setParams } from "../lib/router";
import { useStream } from "../lib/stream";
import { TraceAccumulator } from "../timeline/live";
import { useVersion } from "../lib/session";
import { TimelineCanvas, type ColorBy, type View } from "../timeline/TimelineCanvas";
import { parseTrace } from "../timeline/trace";

// The page draws tasks, phases and arrows, not each task's wait for resources (two of its
// three events): it leaves those out of its fetches. The download keeps everything.
const DRAWN = { waits: "false" };

const WINDOWS: [string, number][] = [
  ["30 s", 30],
  ["1 min", 60],
  ["5 min", 300],
  ["15 min", 900],
  ["1 h", 3600],
];

export function Timeline({ params }: { params: URLSearchParams }) {
  const recorded = !!useVersion()?.history;
  const win = Number(params.get("window") ?? 60) || 60;
  const colorBy: ColorBy = params.get("color") === "state" ? "state" : "function";
  const flows = params.get("flows") === "1";
  const node = params.get("node") ?? "";
  const job = params.get("job") ?? "";
  const [follow, setFollow] = useState(true);
  const q = { last_seconds: win, node_id: node || undefined, job_id: job || undefined };
  const acc = useRef(new TraceAccumulator());
  const [version, setVersion] = useState(0);
  const [loading, setLoading] = useState(true);
  const [error, setError] = useState<string | undefined>();
  const busy = useRef(false);
  const queued = useRef<"full" | "more" | null>(null);
  const key = JSON.stringify(q);

  // The latest window and filters: a fetch queued behind another runs with these, not with
  // the ones of the render that queued it.
  const cur = useRef({ q, win, follow, key });
  cur.current = { q, win, follow, key };
  // The whole window once, then only what ended since the latest slice (with 5 s of overlap
  // for events that arrive late); one fetch at a time, a burst of stream messages costs one.
  const fetchMore = async (full: boolean) => {
    if (busy.current) {
      // A new window or filter (full) outranks a pending incremental fetch.
      queued.current = full || queued.current === "full" ? "full" : "more";
      return;
    }
    busy.current = true;
    const { q, win, follow, key: started } = cur.current;
    try {
      const a = acc.current;
      if (full) {
        // The last 10 s first, so the page shows the newest tasks at once.
        const head = Math.min(win, 10);
        const now = Date.now() / 1000;
        const recent = await getJSON<unknown>("api/timeline", { ...q, ...DRAWN, last_seconds: head }, undefined, 60_000);
        a.reset();
        a.add(recent);
        setVersion(a.version);
        setLoading(false);
        // Then older spans, each twice the last (10 s, 20 s, 40 s, ...): the page fills in
        // backwards, a window of any length in a few requests, each drawn as it lands.
        let end = now - head;
        let span = head;
        while (end > now - win && cur.current.key === started) {
          const start = Math.max(now - win, end - span);
          a.add(await getJSON<unknown>("api/timeline", { ...q, ...DRAWN, last_seconds: undefined, since: start, until: end }, undefined, 60_000));
          setVersion(a.version);
          end = start;
          span *= 2;
        }
      } else {
        const since = a.latestEnd ? a.latestEnd / 1e6 - 5 : Date.now() / 1000 - win;
        a.add(await getJSON<unknown>("api/timeline", { ...q, ...DRAWN, last_seconds: undefined, since }, undefined, 60_000));
      }
      if (follow) a.prune(Date.now() * 1000 - win * 1e6);
      setError(undefined);
      setVersion(a.version);
    } catch (e) {
      setError(errorText(e));
    } finally {
      busy.current = false;
      setLoading(false);
      const next = queued.current;
      queued.current = null;
      if (next === "full") fetchMore(true);
      else if (next === "more") window.setTimeout(() => fetchMore(false), 1000);
    }
  };
  useEffect(() => {
    setLoading(true);
    fetchMore(true);
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [key]);
  const lastLive = useRef(0);
  useStream(
    follow ? ["tasks"] : [],
    () => {
      const now = Date.now();
      if (now - lastLive.current < 2000) return;
      lastLive.current = now;
      fetchMore(false);
    },
    [follow, key],
  );
  useEffect(() => {
    if (!follow) return;
    const t = setInterval(() => fetchMore(false), 5000);
    return () => clearInterval(t);
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [follow, key]);
  // eslint-disable-next-line react-hooks/exhaustive-deps
  const trace = useMemo(() => parseTrace(acc.current.events()), [version]);
  const [view, setView] = useState<View>(() => ({ t0: Date.now() * 1000 - win * 1e6, t1: Date.now() * 1000 }));

  // Following: the view is the last `win` seconds, moving with the clock.
  useEffect(() => {
    if (!follow) return;
    const tick = () => setView({ t0: Date.now() * 1000 - win * 1e6, t1: Date.now() * 1000 });
    tick();
    const t = setInterval(tick, 1000);
    return () => clearInterval(t);
  }, [follow, win]);

  return (
    <div>
      <h1>Timeline</h1>
      <div class="toolbar">
        <label>
          Window
          <select value={String(win)} onChange={(e) => setParams({ window: (e.currentTarget as HTMLSelectElement).value })} data-testid="timeline-window">
            {WINDOWS.map(([l, s]) => (
              <option key={s} value={String(s)} selected={s === win}>
                last {l}
              </option>
            ))}
          </select>
        </label>
        <label>
          Colour by
          <select value={colorBy} onChange={(e) => setParams({ color: (e.currentTarget as HTMLSelectElement).value === "state" ? "state" : undefined })}>
            <option value="function">function</option>
            <option value="state">state / phase</option>
          </select>
        </label>
        <label>
          <input type="checkbox" checked={flows} onChange={(e) => setParams({ flows: (e.currentTarget as HTMLInputElement).checked ? "1" : undefined })} data-testid="timeline-flows" />
          flow edges ({trace.flows.length})
        </label>
        <NodeSelect value={node} onChange={(v) => setParams({ node: v })} anyLabel="all" testId="timeline-node" />
        <label>
          <input type="checkbox" checked={follow} onChange={(e) => setFollow((e.currentTarget as HTMLInputElement).checked)} data-testid="timeline-follow" />
          {recorded ? "follow the end" : "follow live"}
        </label>
        <button onClick={() => {
            setFollow(false);
            setView({ t0: trace.start, t1: Math.max(trace.end, trace.start + 1000) });
          }} disabled={!trace.count}>
          Fit
        </button>
        <a class="button" href={apiUrl("api/timeline", q)} download="ember-timeline.json" data-testid="timeline-download">
          ⤓ Download Chrome trace
        </a>
        <span class="count" data-testid="timeline-count">
          {trace.count.toLocaleString()} slices · {countRows(trace.rows)}
        </span>
      </div>
      <ErrorBox error={error} />
      <div class="note">Wheel to zoom, drag to pan, hover a slice for details. Open the download in chrome://tracing, Perfetto or speedscope.</div>
      <TimelineCanvas
        trace={trace}
        view={view}
        onView={(v) => {
          setFollow(false);
          setView(v);
        }}
        colorBy={colorBy}
        showFlows={flows}
        height={240}
      />
      {!loading && trace.count === 0 && <div class="empty">No tasks ran in the last {win} s.</div>}
    </div>
  );
}

// Drivers have rows of their own (the tasks they submitted leave from there, as Ray's
// submit_task events do): counted apart from the workers that ran tasks. So is the
// autoscaler's row of scaling decisions (no process of the cluster ran those).
function countRows(rows: { label: string }[]): string {
  const drivers = rows.filter((r) => r.label.startsWith("driver:")).length;
  const scaler = rows.some((r) => r.label === "autoscaler");
  const workers = rows.length - drivers - (scaler ? 1 : 0);
  const plural = (n: number, one: string) => `${n} ${one}${n === 1 ? "" : "s"}`;
  const text = drivers ? `${plural(workers, "worker")} · ${plural(drivers, "driver")}` : plural(workers, "worker");
  return scaler ? `${text} · autoscaler decisions` : text;
}
