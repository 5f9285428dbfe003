import { money } from "./format";

/**
 * Stacked bar charts as server-rendered SVG: no script, no CDN. The geometry is a pure function
 * (tested on its own); colours come from the stylesheet's classes, so both themes apply.
 */

export interface ChartBar {
  /** the axis label, e.g. "11-29" */
  label: string;
  /** stacked bottom up, in series order; a series absent from a bar counts 0 */
  values: Record<string, number>;
}

export interface ChartInput {
  /** the stacked series, bottom first; each gets a colour class by its place here */
  series: readonly string[];
  /** series drawn in the alarm colour instead (an outcome that went wrong) */
  alarming?: readonly string[];
  bars: readonly ChartBar[];
  /** a horizontal reference line (a daily budget), or null */
  line: { value: number; label: string } | null;
}

export interface Rect {
  x: number;
  y: number;
  width: number;
  height: number;
}

export interface Geometry {
  width: number;
  height: number;
  plot: Rect;
  /** the value at the top of the plot */
  max: number;
  /** between two ticks */
  step: number;
  bars: { label: string; x: number; width: number; total: number; segments: (Rect & { series: number })[] }[];
  /** y of the reference line, or null */
  lineY: number | null;
  ticks: { value: number; y: number }[];
  /** no bar has anything to draw */
  empty: boolean;
}

export const CHART_WIDTH = 640;
export const CHART_HEIGHT = 300;
const MARGIN = { top: 16, right: 12, bottom: 34, left: 96 };

/** A round step for about `count` ticks up to `max` (1, 2 or 5 times a power of ten). */
function niceStep(max: number, count: number): number {
  const raw = max / count;
  const power = 10 ** Math.floor(Math.log10(raw));
  const scaled = raw / power;
  return (scaled <= 1 ? 1 : scaled <= 2 ? 2 : scaled <= 5 ? 5 : 10) * power;
}

export function chartGeometry(input: ChartInput): Geometry {
  const plot: Rect = {
    x: MARGIN.left,
    y: MARGIN.top,
    width: CHART_WIDTH - MARGIN.left - MARGIN.right,
    height: CHART_HEIGHT - MARGIN.top - MARGIN.bottom,
  };
  const totals = input.bars.map((bar) =>
    input.series.reduce((sum, name) => sum + Math.max(0, bar.values[name] ?? 0), 0),
  );
  const highest = Math.max(0, ...totals, input.line?.value ?? 0);
  const step = highest > 0 ? niceStep(highest, 4) : 1;
  const max = highest > 0 ? Math.ceil((highest * 1.05) / step) * step : 1;
  const yOf = (value: number) => plot.y + plot.height * (1 - value / max);
  const slot = input.bars.length ? plot.width / input.bars.length : plot.width;
  const barWidth = Math.max(1, slot * 0.72);
  const bars = input.bars.map((bar, i) => {
    const x = plot.x + i * slot + (slot - barWidth) / 2;
    let base = 0;
    const segments: Geometry["bars"][number]["segments"] = [];
    input.series.forEach((name, series) => {
      const value = Math.max(0, bar.values[name] ?? 0);
      if (value <= 0) return;
      const top = yOf(base + value);
      segments.push({ series, x, y: top, width: barWidth, height: yOf(base) - top });
      base += value;
    });
    return { label: bar.label, x, width: barWidth, total: totals[i] ?? 0, segments };
  });
  const ticks: Geometry["ticks"] = [];
  for (let value = 0; value <= max + step / 1e6; value += step) ticks.push({ value, y: yOf(value) });
  return {
    width: CHART_WIDTH,
    height: CHART_HEIGHT,
    plot,
    max,
    step,
    bars,
    lineY: input.line ? yOf(input.line.value) : null,
    ticks,
    empty: totals.every((t) => t <= 0),
  };
}

/** Which bars get an axis label: about five (room for them at phone width), the last always (today). */
function labelled(count: number): Set<number> {
  const every = Math.max(1, Math.ceil(count / 5));
  const shown = new Set<number>();
  for (let i = count - 1; i >= 0; i -= every) shown.add(i);
  return shown;
}

export interface BarChartProps extends ChartInput {
  /** unique on the page: the title and description ids derive from it */
  id: string;
  title: string;
  description: string;
  /** what the empty chart says instead of bars */
  emptyText: string;
  /** a value as the axis shows it; `step` is the ticks' spacing, for how many digits it needs */
  format: (value: number, step: number) => string;
}

/** The chart, with its legend; an "empty" panel when there is nothing to draw. */
export function BarChart(props: BarChartProps) {
  const g = chartGeometry(props);
  if (g.empty) {
    return (
      <p class="empty chart-empty" data-chart={props.id}>
        {props.emptyText}
      </p>
    );
  }
  const shown = labelled(g.bars.length);
  const bottom = g.plot.y + g.plot.height;
  return (
    <figure class="chart" data-chart={props.id}>
      <svg
        viewBox={`0 0 ${g.width} ${g.height}`}
        role="img"
        aria-labelledby={`${props.id}-title ${props.id}-desc`}
        preserveAspectRatio="xMidYMid meet"
      >
        <title id={`${props.id}-title`}>{props.title}</title>
        <desc id={`${props.id}-desc`}>{props.description}</desc>
        {g.ticks.map((t) => (
          <g class="chart-tick">
            <line x1={g.plot.x} x2={g.plot.x + g.plot.width} y1={t.y} y2={t.y} />
            <text x={g.plot.x - 8} y={t.y} text-anchor="end" dominant-baseline="middle">
              {props.format(t.value, g.step)}
            </text>
          </g>
        ))}
        {g.bars.map((bar, i) => (
          <g class="chart-bar" data-label={bar.label}>
            {bar.segments.map((s) => (
              <rect
                class={seriesClass(props, s.series)}
                x={s.x}
                y={s.y}
                width={s.width}
                height={s.height}
                data-series={props.series[s.series]}
              />
            ))}
            {shown.has(i) ? (
              // The last label ends at its bar, so it stays inside the chart however wide its text.
              <text
                class="chart-label"
                x={i === g.bars.length - 1 && g.bars.length > 1 ? bar.x + bar.width : bar.x + bar.width / 2}
                y={bottom + 22}
                text-anchor={i === g.bars.length - 1 && g.bars.length > 1 ? "end" : "middle"}
              >
                {bar.label}
              </text>
            ) : null}
          </g>
        ))}
        <line class="chart-axis" x1={g.plot.x} x2={g.plot.x + g.plot.width} y1={bottom} y2={bottom} />
        {props.line && g.lineY !== null ? (
          <g class="chart-line" data-value={props.line.value}>
            <line x1={g.plot.x} x2={g.plot.x + g.plot.width} y1={g.lineY} y2={g.lineY} />
            <text x={g.plot.x + g.plot.width - 4} y={g.lineY - 6} text-anchor="end">
              {props.line.label}
            </text>
          </g>
        ) : null}
      </svg>
      <figcaption class="chart-legend small">
        {props.series.map((name, i) => (
          <span>
            <span class={`swatch ${seriesClass(props, i)}`} aria-hidden="true"></span>
            {name}
          </span>
        ))}
        {props.line ? (
          <span>
            <span class="swatch swatch-line" aria-hidden="true"></span>
            {props.line.label}
          </span>
        ) : null}
      </figcaption>
    </figure>
  );
}

/** USD with as many decimals as ticks `step` apart need to differ (at least 2). */
export function usdTick(value: number, step: number): string {
  const digits = Math.min(4, Math.max(2, Math.ceil(-Math.log10(step) - 1e-9)));
  return money(value, "USD", digits);
}

/** A series' colour: its place among the six chart colours, or the alarm colour. */
function seriesClass(input: Pick<ChartInput, "series" | "alarming">, series: number): string {
  return input.alarming?.includes(input.series[series] ?? "") ? "chart-alarm" : `chart-s${series % 6}`;
}
