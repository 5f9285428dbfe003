import { describe, expect, it } from "vitest";
import { admit, emptyLog, WINDOW_MS } from "../../src/auth/rate-window";

const limits = { requestsPerMin: 3, rentalsPerMin: 2 };

describe("sliding-window admission", () => {
  it("admits up to the request limit in a minute, then refuses with the wait until the oldest leaves", () => {
    const log = emptyLog();
    expect(admit(log, 1_000, false, limits)).toEqual({ admitted: true });
    expect(admit(log, 11_000, false, limits)).toEqual({ admitted: true });
    expect(admit(log, 21_000, false, limits)).toEqual({ admitted: true });
    expect(admit(log, 30_000, false, limits)).toEqual({ admitted: false, limit: "requests", retryAfterS: 31 });
    // The refused request was not counted: once the first leaves the window, one more fits.
    expect(admit(log, 1_000 + WINDOW_MS, false, limits)).toEqual({ admitted: true });
    expect(admit(log, 1_000 + WINDOW_MS, false, limits)).toMatchObject({ admitted: false, retryAfterS: 10 });
  });

  it("has no boundary burst: the limit holds over every 60 s span", () => {
    const log = emptyLog();
    for (let i = 0; i < 3; i++) expect(admit(log, 59_000 + i, false, limits).admitted).toBe(true);
    // A fixed window starting at 60 s would let three more in here.
    expect(admit(log, 61_000, false, limits).admitted).toBe(false);
    expect(admit(log, 119_001, false, limits).admitted).toBe(true);
  });

  it("limits rentals separately, and a rental also counts as a request", () => {
    const log = emptyLog();
    expect(admit(log, 0, true, limits).admitted).toBe(true);
    expect(admit(log, 1_000, true, limits).admitted).toBe(true);
    expect(admit(log, 2_000, true, limits)).toEqual({ admitted: false, limit: "rentals", retryAfterS: 58 });
    expect(admit(log, 2_000, false, limits).admitted).toBe(true);
    expect(admit(log, 3_000, false, limits)).toMatchObject({ admitted: false, limit: "requests" });
  });

  it("waits for the excess to age out after the limit was lowered, and never says more than 60 s", () => {
    const log = emptyLog();
    for (let i = 0; i < 5; i++) admit(log, i * 10_000, false, { requestsPerMin: 10, rentalsPerMin: 10 });
    // 5 counted at 0..40 s; with a limit of 2 only one may remain: the fourth (30 s) leaves at 90 s.
    expect(admit(log, 45_000, false, { requestsPerMin: 2, rentalsPerMin: 2 })).toMatchObject({ retryAfterS: 45 });
    expect(admit(log, 45_000, false, { requestsPerMin: 1, rentalsPerMin: 1 })).toMatchObject({ retryAfterS: 55 });
    const early = emptyLog();
    early.requests.push(10_000); // written by a clock ahead of this one
    expect(admit(early, 0, false, { requestsPerMin: 1, rentalsPerMin: 1 })).toMatchObject({ retryAfterS: 60 });
  });
});
