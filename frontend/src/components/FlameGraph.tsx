// A flame graph drawn on a canvas from a speedscope profile (what py-spy records): the samples
// of every thread are merged into one call tree, root at the top; width is time on CPU.
// Click a frame to zoom into it, click the root to zoom out; hover says name, file and share.
import { useEffect, useMemo, useRef, useState } from "preact/hooks";
import { cssVar } from "../lib/theme";

interface SpeedscopeFrame {
  name: string;
  file?: string;
  line?: number;
}
interface SpeedscopeProfile {
  type: string;
  samples?: number[][];
  weights?: number[];
  name?: string;
}
export interface Speedscope {
  shared: { frames: SpeedscopeFrame[] };
  profiles: SpeedscopeProfile[];
}

export interface FlameNode {
  name: string;
  file: string;
  value: number;
  children: Map<string, FlameNode>;
}

export function buildTree(p: Speedscope): FlameNode & { samples: number } {
  const root = { name: "all", file: "", value: 0, children: new Map<string, FlameNode>(), samples: 0 };
  for (const prof of p.profiles) {
    if (prof.type !== "sampled" || !prof.samples) continue;
    root.samples += prof.samples.length;
    prof.samples.forEach((stack, i) => {
      const w = prof.weights?.[i] ?? 1;
      root.value += w;
      let node: FlameNode = root;
      for (const fi of stack) {
        const f = p.shared.frames[fi] ?? { name: `?${fi}` };
        const key = `${f.name}\u0000${f.file ?? ""}:${f.line ?? ""}`;
        let child = node.children.get(key);
        if (!child) node.children.set(key, (child = { name: f.name, file: f.file ? `${f.file}:${f.line ?? ""}` : "", value: 0, children: new Map() }));
        child.value += w;
        node = child;
      }
    });
  }
  return root;
}

function depthOf(n: FlameNode): number {
  let d = 0;
  for (const c of n.children.values()) d = Math.max(d, depthOf(c));
  return d + 1;
}

function hue(name: string): string {
  let h = 0;
  for (let i = 0; i < name.length; i++) h = (h * 31 + name.charCodeAt(i)) | 0;
  return `hsl(${20 + (Math.abs(h) % 40)}, ${70 + (Math.abs(h >> 8) % 20)}%, ${55 + (Math.abs(h >> 4) % 12)}%)`;
}

const ROW = 18;

export function FlameGraph({ profile }: { profile: Speedscope }) {
  const root = useMemo(() => buildTree(profile), [profile]);
  const [focus, setFocus] = useState<FlameNode[]>([root]);
  const canvas = useRef<HTMLCanvasElement>(null);
  const boxes = useRef<{ x: number; y: number; w: number; n: FlameNode; path: FlameNode[] }[]>([]);
  const [tip, setTip] = useState<{ x: number; y: number; text: string } | null>(null);
  const top = focus[focus.length - 1];
  const depth = useMemo(() => depthOf(top) + focus.length - 1, [top, focus.length]);

  useEffect(() => setFocus([root]), [root]);

  useEffect(() => {
    const c = canvas.current!;
    const draw = () => {
      const width = c.parentElement!.clientWidth;
      const height = depth * ROW + 2;
      const dpr = devicePixelRatio || 1;
      c.width = width * dpr;
      c.height = height * dpr;
      c.style.width = `${width}px`;
      c.style.height = `${height}px`;
      const g = c.getContext("2d")!;
      g.scale(dpr, dpr);
      g.font = "11px ui-monospace, monospace";
      g.textBaseline = "middle";
      const list: typeof boxes.current = [];
      // The ancestors of the focused frame span the full width, greyed.
      focus.forEach((n, i) => list.push({ x: 0, y: i * ROW, w: width, n, path: focus.slice(0, i + 1) }));
      const walk = (n: FlameNode, x: number, w: number, y: number, path: FlameNode[]) => {
        let cx = x;
        for (const c2 of [...n.children.values()].sort((a, b) => b.value - a.value)) {
          const cw = (c2.value / n.value) * w;
          if (cw >= 0.5) {
            const p2 = [...path, c2];
            list.push({ x: cx, y, w: cw, n: c2, path: p2 });
            walk(c2, cx, cw, y + ROW, p2);
          }
          cx += cw;
        }
      };
      walk(top, 0, width, focus.length * ROW, focus);
      const fg = "#111";
      for (const b of list) {
        const ancestor = b.y < (focus.length - 1) * ROW + 1;
        g.fillStyle = ancestor ? cssVar("--bg-2") || "#ccc" : hue(b.n.name);
        g.fillRect(b.x, b.y, Math.max(0.5, b.w - 0.5), ROW - 1);
        if (b.w > 30) {
          g.fillStyle = ancestor ? cssVar("--fg") || fg : fg;
          const label = b.n.name;
          const max = Math.floor((b.w - 6) / 6.6);
          g.fillText(label.length > max ? `${label.slice(0, Math.max(0, max - 1))}…` : label, b.x + 3, b.y + ROW / 2);
        }
      }
      boxes.current = list;
    };
    draw();
    const ro = new ResizeObserver(draw);
    ro.observe(c.parentElement!);
    return () => ro.disconnect();
  }, [top, focus, depth]);

  const hit = (e: MouseEvent) => {
    const r = (e.currentTarget as HTMLCanvasElement).getBoundingClientRect();
    const x = e.clientX - r.left;
    const y = e.clientY - r.top;
    return boxes.current.find((b) => x >= b.x && x < b.x + b.w && y >= b.y && y < b.y + ROW);
  };

  if (root.samples === 0) return <div class="empty" data-testid="flamegraph-empty">The profile holds no samples (the worker was idle or exited).</div>;
  return (
    <div class="flame" data-testid="flamegraph" data-samples={root.samples}>
      <canvas
        ref={canvas}
        onMouseMove={(e) => {
          const b = hit(e);
          setTip(b ? { x: e.offsetX, y: e.offsetY, text: `${b.n.name} ${b.n.file} — ${((100 * b.n.value) / root.value).toFixed(1)}%` } : null);
        }}
        onMouseLeave={() => setTip(null)}
        onClick={(e) => {
          const b = hit(e);
          if (b) setFocus(b.path);
        }}
      />
      {tip && (
        <div class="tip" style={{ left: `${Math.max(0, Math.min(tip.x + 12, (canvas.current?.clientWidth ?? 600) - 360))}px`, top: `${tip.y + 14}px` }}>
          {tip.text}
        </div>
      )}
    </div>
  );
}
