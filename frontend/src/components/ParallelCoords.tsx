// Parallel coordinates of Tune trials: one vertical axis per hyperparameter and one for the
// metric, one line per trial through its values, coloured by the metric (better is warmer)
// and the best trial drawn thick on top. Plain SVG: a few hundred lines need no library.
import { useMemo } from "preact/hooks";

export interface PcTrial {
  id: string;
  values: Record<string, unknown>;
}

const W = 900;
const H = 260;
const PAD = { top: 24, bottom: 36, side: 50 };

type Axis = { key: string; label: string; pos: (v: unknown) => number | null; ticks: [number, string][] };

function axisOf(key: string, label: string, values: unknown[]): Axis | null {
  const nums = values.filter((v): v is number => typeof v === "number" && Number.isFinite(v));
  const span = H - PAD.top - PAD.bottom;
  if (nums.length && nums.length === values.filter((v) => v !== null && v !== undefined).length) {
    let lo = Math.min(...nums);
    let hi = Math.max(...nums);
    if (lo === hi) {
      lo -= 1;
      hi += 1;
    }
    // A range over three decades (a learning rate) is drawn on a log scale, as users read it.
    const log = lo > 0 && hi / lo >= 1000;
    const f = (v: number) => (log ? (Math.log10(v) - Math.log10(lo)) / (Math.log10(hi) - Math.log10(lo)) : (v - lo) / (hi - lo));
    const fmt = (v: number) => (Math.abs(v) >= 1000 || (Math.abs(v) < 0.01 && v !== 0) ? v.toExponential(1) : String(+v.toFixed(3)));
    return {
      key,
      label,
      pos: (v) => (typeof v === "number" && Number.isFinite(v) ? PAD.top + span * (1 - f(v)) : null),
      ticks: [
        [PAD.top + span, fmt(lo)],
        [PAD.top, fmt(hi)],
      ],
    };
  }
  const cats = [...new Set(values.filter((v) => v !== null && v !== undefined).map((v) => JSON.stringify(v)))].sort();
  if (!cats.length) return null;
  const step = cats.length > 1 ? span / (cats.length - 1) : 0;
  const at = (c: string) => PAD.top + (cats.length > 1 ? step * cats.indexOf(c) : span / 2);
  return {
    key,
    label,
    pos: (v) => (v === null || v === undefined ? null : at(JSON.stringify(v))),
    ticks: cats.slice(0, 8).map((c) => [at(c), c.replace(/^"|"$/g, "").slice(0, 12)]),
  };
}

export function ParallelCoords(p: { trials: PcTrial[]; params: string[]; metric: string | null; mode: string | null; best: string | null }) {
  const { axes, lines } = useMemo(() => {
    const keys = [...p.params, ...(p.metric ? [`last/${p.metric}`] : [])];
    const axes = keys
      .map((k) => axisOf(k, k.replace(/^config\//, "").replace(/^last\//, ""), p.trials.map((t) => t.values[k])))
      .filter((a): a is Axis => a !== null);
    const mkey = p.metric ? `last/${p.metric}` : null;
    const ms = p.trials.map((t) => (mkey ? t.values[mkey] : null)).filter((v): v is number => typeof v === "number");
    const lo = Math.min(...ms);
    const hi = Math.max(...ms);
    const lines = p.trials.map((t) => {
      const m = mkey ? t.values[mkey] : null;
      let good = 0.5;
      if (typeof m === "number" && hi > lo) good = p.mode === "min" ? (hi - m) / (hi - lo) : (m - lo) / (hi - lo);
      const pts = axes
        .map((a, i) => {
          const y = a.pos(t.values[a.key]);
          return y === null ? null : `${x(i, axes.length)},${y.toFixed(1)}`;
        })
        .filter(Boolean);
      return { id: t.id, points: pts.join(" "), color: `hsl(${(220 - 200 * good).toFixed(0)} 70% 50%)` };
    });
    lines.sort((a, b) => (a.id === p.best ? 1 : b.id === p.best ? -1 : 0));
    return { axes, lines };
  }, [p.trials, p.params, p.metric, p.mode, p.best]);
  if (axes.length < 2) return <div class="note">Parallel coordinates need at least one hyperparameter and a metric.</div>;
  return (
    <svg class="card pcoords" viewBox={`0 0 ${W} ${H}`} width={W} height={H} data-testid="tune-pcoords" data-lines={lines.length} data-axes={axes.length}>
      {lines.map((l) => (
        <polyline
          key={l.id}
          points={l.points}
          fill="none"
          stroke={l.id === p.best ? "#e4572e" : l.color}
          stroke-width={l.id === p.best ? 3 : 1.2}
          opacity={l.id === p.best ? 1 : 0.6}
          data-trial={l.id}
        >
          <title>{l.id}</title>
        </polyline>
      ))}
      {axes.map((a, i) => (
        <g key={a.key}>
          <line x1={x(i, axes.length)} x2={x(i, axes.length)} y1={PAD.top} y2={H - PAD.bottom} stroke="currentColor" opacity={0.5} />
          <text x={x(i, axes.length)} y={H - 12} text-anchor="middle" font-size="12" fill="currentColor">
            {a.label}
          </text>
          {a.ticks.map(([y, t]) => (
            <text key={`${y}-${t}`} x={x(i, axes.length) + 4} y={y + 4} font-size="10" fill="currentColor" opacity={0.7}>
              {t}
            </text>
          ))}
        </g>
      ))}
    </svg>
  );
}

function x(i: number, n: number): number {
  return PAD.side + (n > 1 ? ((W - 2 * PAD.side) * i) / (n - 1) : 0);
}
