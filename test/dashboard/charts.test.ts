import { describe, expect, it } from "vitest";
import { BarChart, type ChartInput, chartGeometry, usdTick } from "../../src/dashboard/charts";

const input = (over: Partial<ChartInput> = {}): ChartInput => ({
  series: ["runpod", "vast"],
  bars: [
    { label: "a", values: { runpod: 2, vast: 1 } },
    { label: "b", values: { vast: 4 } },
    { label: "c", values: {} },
  ],
  line: null,
  ...over,
});

const render = async (over: Partial<ChartInput> = {}) =>
  String(
    await BarChart({
      ...input(over),
      id: "t",
      title: "T",
      description: "D",
      emptyText: "No spend",
      format: (v) => String(v),
    }),
  );

describe("chartGeometry", () => {
  it("stacks each bar's series bottom up, heights in proportion to the values", () => {
    const g = chartGeometry(input());
    const bottom = g.plot.y + g.plot.height;
    const [a, b, c] = g.bars;
    expect(a!.segments.map((s) => s.series)).toEqual([0, 1]);
    const [runpod, vast] = a!.segments;
    // runpod sits on the axis, vast right on top of it.
    expect(runpod!.y + runpod!.height).toBeCloseTo(bottom, 6);
    expect(vast!.y + vast!.height).toBeCloseTo(runpod!.y, 6);
    expect(runpod!.height).toBeCloseTo(2 * vast!.height, 6);
    // A bar of 4 is as tall as the 2 + 1 bar plus a third.
    expect(b!.segments).toHaveLength(1);
    expect(b!.segments[0]!.height).toBeCloseTo((4 / 3) * (runpod!.height + vast!.height), 6);
    expect(b!.segments[0]!.height).toBeCloseTo((4 / g.max) * g.plot.height, 6);
    expect(c!.segments).toEqual([]);
    expect(g.bars.map((bar) => bar.total)).toEqual([3, 4, 0]);
    // Bars side by side, inside the plot, in order.
    expect(a!.x).toBeGreaterThanOrEqual(g.plot.x);
    expect(b!.x).toBeGreaterThan(a!.x + a!.width);
    expect(c!.x + c!.width).toBeLessThanOrEqual(g.plot.x + g.plot.width);
    expect(g.max).toBeGreaterThanOrEqual(4);
    expect(g.empty).toBe(false);
  });

  it("draws the reference line at its value's height, and makes room for a line above every bar", () => {
    const g = chartGeometry(input({ line: { value: 2, label: "budget" } }));
    const bottom = g.plot.y + g.plot.height;
    expect(g.lineY).toBeCloseTo(bottom - (2 / g.max) * g.plot.height, 6);
    // The line meets the top of the 2 USD runpod segment.
    expect(g.lineY).toBeCloseTo(g.bars[0]!.segments[0]!.y, 6);

    const high = chartGeometry(input({ line: { value: 10, label: "budget" } }));
    expect(high.max).toBeGreaterThanOrEqual(10);
    expect(high.lineY!).toBeGreaterThanOrEqual(high.plot.y);
    expect(chartGeometry(input()).lineY).toBeNull();
  });

  it("has round ticks from 0 to the top", () => {
    const g = chartGeometry(input({ bars: [{ label: "a", values: { runpod: 7.3 } }] }));
    expect(g.ticks[0]).toEqual({ value: 0, y: g.plot.y + g.plot.height });
    expect(g.ticks.at(-1)!.value).toBeCloseTo(g.max, 9);
    expect(g.ticks.map((t) => t.value)).toEqual([0, 2, 4, 6, 8]);
  });

  it("is empty when nothing was spent, negative values ignored", () => {
    expect(chartGeometry(input({ bars: [{ label: "a", values: {} }] })).empty).toBe(true);
    expect(chartGeometry(input({ bars: [] })).empty).toBe(true);
    expect(chartGeometry(input({ bars: [{ label: "a", values: { runpod: -1 } }] })).empty).toBe(true);
  });
});

describe("usdTick", () => {
  it("has as many decimals as the ticks need to differ", () => {
    expect([0, 0.2, 0.4].map((v) => usdTick(v, 0.2))).toEqual(["$0.00", "$0.20", "$0.40"]);
    expect([0.005, 0.01, 0.015].map((v) => usdTick(v, 0.005))).toEqual(["$0.005", "$0.010", "$0.015"]);
    expect(usdTick(20, 5)).toBe("$20.00");
  });
});

describe("BarChart", () => {
  it("renders an accessible SVG: role img, a title and a description, one rect per segment, the line", async () => {
    const html = await render({ line: { value: 2, label: "budget $2" } });
    expect(html).toContain('role="img"');
    expect(html).toContain('aria-labelledby="t-title t-desc"');
    expect(html).toMatch(/<title id="t-title">T<\/title>/);
    expect(html).toMatch(/<desc id="t-desc">D<\/desc>/);
    expect(html.match(/<rect /g)).toHaveLength(3);
    expect(html).toContain('class="chart-line"');
    expect(html).toContain("budget $2");
    expect(html).not.toContain("style=");
  });

  it("draws a series named alarming in the alarm colour, in the bars and the legend; the others by place", async () => {
    const html = await render({ alarming: ["vast"] });
    expect(html.match(/class="chart-alarm"[^>]*data-series="vast"/g)).toHaveLength(2);
    expect(html).toMatch(/class="chart-s0"[^>]*data-series="runpod"/);
    expect(html).toContain('class="swatch chart-alarm"');
    expect(html).toContain('class="swatch chart-s0"');
    expect(html).not.toContain("chart-s1");
  });

  it("says there is nothing to show instead of an empty chart", async () => {
    const html = await render({ bars: [{ label: "a", values: {} }], line: { value: 5, label: "budget" } });
    expect(html).not.toContain("<svg");
    expect(html).toContain("No spend");
  });
});
