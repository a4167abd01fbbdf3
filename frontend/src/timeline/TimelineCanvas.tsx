// The task stream on a canvas: a row per worker grouped by node, a slice per task (its phases
// nested below it), gaps show idleness (as Dask's task stream). Wheel zooms around the cursor,
// drag pans, hover shows the slice; only what is in view is drawn, so 100,000 slices stay smooth.
import { useEffect, useMemo, useRef, useState } from "preact/hooks";
import { cssVar } from "../lib/theme";
import { firstVisible, type Slice, type Trace } from "./trace";

const LANE = 16; // px per nesting level
const GAP = 4;
const LABEL_W = 180;
const AXIS_H = 22;

export type ColorBy = "function" | "state";

export function colorFor(s: Slice, by: ColorBy): string {
  if (by === "state") {
    const st = String(s.args.state ?? s.cat ?? "");
    if (/FAIL|ERROR/i.test(st) || s.args.error) return "#fa5252";
    if (/PEND|WAIT|SCHED/i.test(st + s.name)) return "#fcc419";
    if (st === "RUNNING") return "#4dabf7"; // as the Tasks page's bars draw running
    if (/FETCH|ARGS/i.test(s.name)) return "#4dabf7";
    if (/STOR|OUTPUT/i.test(s.name)) return "#9775fa";
    return "#40c057";
  }
  let h = 0;
  const n = String(s.args.func_name ?? s.args.function ?? s.name);
  for (let i = 0; i < n.length; i++) h = (h * 31 + n.charCodeAt(i)) | 0;
  return `hsl(${Math.abs(h) % 360}, 62%, ${s.depth ? 68 : 52}%)`;
}

export interface View {
  t0: number;
  t1: number;
}

export function TimelineCanvas(p: {
  trace: Trace;
  view: View;
  onView: (v: View) => void;
  colorBy: ColorBy;
  showFlows: boolean;
  height?: number;
}) {
  const canvas = useRef<HTMLCanvasElement>(null);
  const [hover, setHover] = useState<{ x: number; y: number; s: Slice } | null>(null);
  const drag = useRef<{ x: number; v: View } | null>(null);
  const [width, setWidth] = useState(800);
  const { trace, view } = p;
  // The functions of the tasks drawn as still running (their slice reaches now), for tests
  // and a glance in the inspector: a finished task must not stay listed here.
  const running = useMemo(
    () => [...new Set(trace.rows.flatMap((r) => r.slices.filter((s) => s.cat.startsWith("task::") && s.args.state === "RUNNING").map((s) => s.name)))].sort().join("|"),
    [trace],
  );

  // Row offsets (a row is as tall as its deepest nesting).
  const tops: number[] = [];
  let y = AXIS_H;
  let lastGroup = "";
  for (const r of trace.rows) {
    if (r.group !== lastGroup) {
      y += 18; // the node's header line
      lastGroup = r.group;
    }
    tops.push(y);
    y += r.depth * LANE + GAP;
  }
  const height = Math.max(p.height ?? 200, y + 8);

  useEffect(() => {
    const el = canvas.current!.parentElement!;
    const ro = new ResizeObserver(() => setWidth(el.clientWidth));
    ro.observe(el);
    setWidth(el.clientWidth);
    return () => ro.disconnect();
  }, []);

  const plotW = Math.max(50, width - LABEL_W);
  const xOf = (t: number) => LABEL_W + ((t - view.t0) / Math.max(1, view.t1 - view.t0)) * plotW;
  const tOf = (x: number) => view.t0 + ((x - LABEL_W) / plotW) * (view.t1 - view.t0);

  useEffect(() => {
    const c = canvas.current!;
    const dpr = devicePixelRatio || 1;
    c.width = width * dpr;
    c.height = height * dpr;
    c.style.width = `${width}px`;
    c.style.height = `${height}px`;
    const g = c.getContext("2d")!;
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    const fg = cssVar("--fg");
    const muted = cssVar("--fg-muted");
    const grid = cssVar("--grid");
    g.clearRect(0, 0, width, height);
    g.font = "11px system-ui, sans-serif";
    g.textBaseline = "middle";

    // Time axis: ticks at a round step relative to the window start.
    const span = view.t1 - view.t0;
    const steps = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1e3, 2e3, 5e3, 1e4, 2e4, 5e4, 1e5, 2e5, 5e5, 1e6, 2e6, 5e6, 1e7, 3e7, 6e7, 1.2e8, 3e8, 6e8, 1.8e9, 3.6e9];
    const step = steps.find((s) => span / s <= plotW / 90) ?? steps[steps.length - 1];
    g.fillStyle = muted;
    g.strokeStyle = grid;
    for (let t = Math.ceil(view.t0 / step) * step; t <= view.t1; t += step) {
      const x = xOf(t);
      g.beginPath();
      g.moveTo(x, AXIS_H - 4);
      g.lineTo(x, height);
      g.stroke();
      const d = new Date(t / 1000);
      const label = step >= 1e6 ? d.toLocaleTimeString() : `${d.toLocaleTimeString()}.${String(Math.floor((t / 1000) % 1000)).padStart(3, "0")}`;
      g.fillText(label, x + 2, 10);
    }

    // Rows and node headers.
    let drawn = 0;
    lastGroup = "";
    trace.rows.forEach((r, i) => {
      if (r.group !== lastGroup) {
        lastGroup = r.group;
        g.fillStyle = fg;
        g.font = "600 11px system-ui, sans-serif";
        g.fillText(r.group, 4, tops[i] - 9);
        g.font = "11px system-ui, sans-serif";
      }
      g.fillStyle = muted;
      g.fillText(r.label.length > 28 ? `${r.label.slice(0, 27)}…` : r.label, 12, tops[i] + LANE / 2);
      // Slices in view; several slices in one pixel column are drawn once.
      let lastPx = -1;
      let lastDepth = -1;
      for (let k = firstVisible(r, view.t0); k < r.slices.length; k++) {
        const s = r.slices[k];
        if (s.start > view.t1) break;
        if (s.end < view.t0) continue;
        const x0 = Math.max(LABEL_W, xOf(s.start));
        const x1 = Math.min(width, xOf(s.end));
        const px = Math.floor(x0);
        if (x1 - x0 < 1 && px === lastPx && s.depth === lastDepth) continue;
        lastPx = px;
        lastDepth = s.depth;
        drawn++;
        g.fillStyle = colorFor(s, p.colorBy);
        g.fillRect(x0, tops[i] + s.depth * LANE, Math.max(1, x1 - x0 - 0.5), LANE - 2);
        if (x1 - x0 > 40) {
          g.fillStyle = "#111";
          const max = Math.floor((x1 - x0 - 6) / 6);
          g.fillText(s.name.length > max ? `${s.name.slice(0, Math.max(0, max - 1))}…` : s.name, x0 + 3, tops[i] + s.depth * LANE + LANE / 2 - 1);
        }
      }
    });

    if (p.showFlows) {
      g.strokeStyle = cssVar("--accent");
      g.fillStyle = cssVar("--accent");
      g.lineWidth = 1;
      for (const f of trace.flows) {
        if ((f.from.t < view.t0 && f.to.t < view.t0) || (f.from.t > view.t1 && f.to.t > view.t1)) continue;
        const x0 = xOf(f.from.t);
        const y0 = tops[f.from.row] + LANE / 2;
        const x1 = xOf(f.to.t);
        const y1 = tops[f.to.row] + LANE / 2;
        g.beginPath();
        g.moveTo(x0, y0);
        g.bezierCurveTo((x0 + x1) / 2, y0, (x0 + x1) / 2, y1, x1, y1);
        g.stroke();
        g.beginPath();
        g.moveTo(x1, y1);
        g.lineTo(x1 - 5, y1 - 3);
        g.lineTo(x1 - 5, y1 + 3);
        g.fill();
      }
    }
    g.fillStyle = grid;
    g.fillRect(LABEL_W - 1, AXIS_H, 1, height);
    // What this frame drew, for the tests and the benchmark to read.
    c.dataset.drawn = String(drawn);
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [trace, view, width, height, p.colorBy, p.showFlows]);

  const find = (x: number, yy: number): Slice | undefined => {
    const i = tops.findIndex((t, k) => yy >= t && yy < t + trace.rows[k].depth * LANE);
    if (i < 0 || x < LABEL_W) return undefined;
    const r = trace.rows[i];
    const depth = Math.floor((yy - tops[i]) / LANE);
    const t = tOf(x);
    const slop = (3 * (view.t1 - view.t0)) / plotW; // 3 px, so thin slices can be hovered
    let best: Slice | undefined;
    for (let k = firstVisible(r, t - slop); k < r.slices.length; k++) {
      const s = r.slices[k];
      if (s.start > t + slop) break;
      if (s.depth === depth && s.start - slop <= t && s.end + slop >= t) best = s;
    }
    return best;
  };

  return (
    <div class="timeline-wrap" data-testid="timeline" data-view={`${view.t0},${view.t1}`} data-slices={trace.count} data-rows={trace.rows.length} data-groups={[...new Set(trace.rows.map((r) => r.group))].join("|")} data-running={running}>
      <canvas
        ref={canvas}
        onWheel={(e) => {
          e.preventDefault();
          const r = (e.currentTarget as HTMLCanvasElement).getBoundingClientRect();
          const at = tOf(e.clientX - r.left);
          const k = Math.exp(e.deltaY * 0.002);
          const span = Math.max(50, (view.t1 - view.t0) * k);
          const f = (at - view.t0) / (view.t1 - view.t0);
          p.onView({ t0: at - f * span, t1: at - f * span + span });
        }}
        onMouseDown={(e) => (drag.current = { x: e.clientX, v: view })}
        onMouseUp={() => (drag.current = null)}
        onMouseLeave={() => {
          drag.current = null;
          setHover(null);
        }}
        onMouseMove={(e) => {
          const r = (e.currentTarget as HTMLCanvasElement).getBoundingClientRect();
          if (drag.current) {
            const dt = ((e.clientX - drag.current.x) / plotW) * (drag.current.v.t1 - drag.current.v.t0);
            p.onView({ t0: drag.current.v.t0 - dt, t1: drag.current.v.t1 - dt });
            return;
          }
          const s = find(e.clientX - r.left, e.clientY - r.top);
          setHover(s ? { x: e.clientX - r.left, y: e.clientY - r.top, s } : null);
        }}
      />
      {hover && (
        <div class="tip" data-testid="timeline-tip" style={{ left: `${Math.min(hover.x + 12, width - 340)}px`, top: `${hover.y + 14}px` }}>
          {tipText(hover.s, trace.rows[hover.s.row].group, trace.rows[hover.s.row].label)}
        </div>
      )}
    </div>
  );
}

function tipText(s: Slice, group: string, label: string): string {
  const dur = s.end - s.start;
  const d = dur >= 1e6 ? `${(dur / 1e6).toFixed(2)} s` : dur >= 1e3 ? `${(dur / 1e3).toFixed(2)} ms` : `${dur.toFixed(0)} µs`;
  const lines = [`${s.name}  ${d}`, `${group} · ${label}`, `start ${new Date(s.start / 1000).toLocaleTimeString()}`];
  for (const [k, v] of Object.entries(s.args).slice(0, 8)) {
    const text = typeof v === "object" ? JSON.stringify(v) : String(v);
    lines.push(`${k}: ${text.length > 80 ? `${text.slice(0, 79)}…` : text}`);
  }
  return lines.join("\n");
}
