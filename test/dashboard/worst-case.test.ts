import { describe, expect, it } from "vitest";
import { worstCase } from "../../src/dashboard/worst-case";

const bootBilled = { startsAt: "accepted" as const, minimumMinutes: 0, startTimeoutMin: 20 };
const runBilled = { startsAt: "running" as const, minimumMinutes: 15, startTimeoutMin: 20 };

describe("the rent form's worst case (the budget's formula)", () => {
  it("counts the start timeout for providers that bill while the machine boots", () => {
    const w = worstCase(bootBilled, { pricePerHourUsd: 0.6, maxMinutes: 40, maxCost: null });
    expect(w).toEqual({ usd: 0.6, billedMinutes: 60, cappedByMaxCost: false });
  });

  it("counts from running with the minimum billed minutes where billing starts there", () => {
    expect(worstCase(runBilled, { pricePerHourUsd: 1.2, maxMinutes: 5, maxCost: null }).usd).toBe(0.3);
    expect(worstCase(runBilled, { pricePerHourUsd: 1.2, maxMinutes: 30, maxCost: null }).usd).toBe(0.6);
  });

  it("is max_cost when that is smaller, and the time figure when max_cost is larger", () => {
    const capped = worstCase(bootBilled, { pricePerHourUsd: 3, maxMinutes: 100, maxCost: 2 });
    expect(capped).toEqual({ usd: 2, billedMinutes: 120, cappedByMaxCost: true });
    const loose = worstCase(bootBilled, { pricePerHourUsd: 3, maxMinutes: 100, maxCost: 50 });
    expect(loose).toEqual({ usd: 6, billedMinutes: 120, cappedByMaxCost: false });
  });
});
