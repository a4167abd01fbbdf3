// A time-series chart (uPlot: small, fast, canvas). Data arrive as columns: [times, ...series].
import { useEffect, useMemo, useRef } from "preact/hooks";
import uPlot from "uplot";
import "uplot/dist/uPlot.min.css";
import { cssVar } from "../lib/theme";

export interface SeriesSpec {
  label: string;
  color?: string;
  /** Formats a value on the axis and in the legend. */
  fmt?: (v: number) => string;
  /** Drawn as steps (a count that changes at a moment, such as nodes), not slopes. */
  step?: boolean;
}

const PALETTE = ["#e4572e", "#2e86de", "#17a589", "#f1c40f", "#8e44ad", "#d35400", "#7f8c8d", "#c0392b"];

const AXIS_FONT = "12px system-ui, sans-serif";
let measurer: CanvasRenderingContext2D | null = null;

// The value axis is as wide as its widest label ("1.5 GiB/s", "100,000"), measured in the
// axis's own font, so no label is clipped at the chart's left edge (a fixed 60 px cut them).
function axisSize(_u: uPlot, values: string[] | null): number {
  measurer ??= document.createElement("canvas").getContext("2d");
  if (!values || !measurer) return 50;
  measurer.font = AXIS_FONT;
  const widest = Math.max(0, ...values.map((v) => measurer!.measureText(String(v)).width));
  return Math.max(40, Math.ceil(widest) + 22); // + tick (10), gap (5) and a margin
}

export function Chart(p: {
  title: string;
  series: SeriesSpec[];
  data: number[][];
  height?: number;
  yMax?: number;
  testId?: string;
  /** x is not a time (Tune's curves against iterations or seconds of training). */
  xPlain?: boolean;
  /** The value axis fits the data (a loss near 0.3 or below 0) instead of starting at 0. */
  yFit?: boolean;
}) {
  const host = useRef<HTMLDivElement>(null);
  const plot = useRef<uPlot | null>(null);
  const shape = p.series.map((s) => s.label).join("|");

  useEffect(() => {
    const el = host.current!;
    const make = () => {
      plot.current?.destroy();
      const fg = cssVar("--fg-muted") || "#888";
      const grid = cssVar("--grid") || "#8883";
      const fmt = p.series[0]?.fmt;
      const opts: uPlot.Options = {
        width: Math.max(200, el.clientWidth),
        height: p.height ?? 160,
        legend: { show: true },
        cursor: { drag: { x: true, y: false } },
        scales: {
          x: { time: !p.xPlain },
          y: p.yMax ? { range: [0, p.yMax] } : p.yFit ? { auto: true } : { range: (_u, _min, max) => [0, Math.max(1, max * 1.1)] },
        },
        // Ticks thinned to fit the width: at least ~90 px between time labels ("12:34:56")
        // and 28 px between value labels, so they never overlap on a narrow chart.
        axes: [
          { stroke: fg, grid: { stroke: grid, width: 1 }, ticks: { stroke: grid }, space: (_u, _i, _min, _max, dim) => Math.max(p.xPlain ? 50 : 90, dim / 6) },
          { stroke: fg, grid: { stroke: grid, width: 1 }, ticks: { stroke: grid }, font: AXIS_FONT, size: axisSize, space: 28, values: fmt ? (_u, vals) => vals.map((v) => fmt(v)) : undefined },
        ],
        series: [
          {},
          ...p.series.map((s, i) => ({
            label: s.label,
            stroke: s.color ?? PALETTE[i % PALETTE.length],
            width: 1.5,
            points: { show: false },
            paths: s.step ? uPlot.paths.stepped!({ align: 1 }) : undefined,
            spanGaps: !!p.xPlain, // curves of trials sampled at different x are joined
            value: s.fmt ? (_u: uPlot, v: number | null) => (v === null ? "–" : s.fmt!(v)) : undefined,
          })),
        ],
      };
      plot.current = new uPlot(opts, p.data as uPlot.AlignedData, el);
    };
    make();
    const ro = new ResizeObserver(() => plot.current?.setSize({ width: Math.max(200, el.clientWidth), height: p.height ?? 160 }));
    ro.observe(el);
    window.addEventListener("ember-theme", make);
    return () => {
      ro.disconnect();
      window.removeEventListener("ember-theme", make);
      plot.current?.destroy();
      plot.current = null;
    };
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [shape, p.xPlain]);

  useEffect(() => {
    plot.current?.setData(p.data as uPlot.AlignedData);
  }, [p.data]);

  // What the chart holds, for tests and for a glance in the inspector: uPlot draws an empty
  // canvas without data, so a canvas alone proves nothing.
  const { points, max } = useMemo(() => {
    let n = 0;
    let m = -Infinity;
    for (const col of p.data.slice(1))
      for (const v of col)
        if (typeof v === "number" && Number.isFinite(v)) {
          n++;
          if (v > m) m = v;
        }
    return { points: n, max: n ? m : 0 };
  }, [p.data]);

  return (
    <div class="chart card" data-testid={p.testId} data-points={points} data-max={max}>
      <div class="chart-title">{p.title}</div>
      <div ref={host} />
    </div>
  );
}
