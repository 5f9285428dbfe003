import { describe, expect, it } from "vitest";
import { cronFor, parseCron } from "../../src/schedules/cron";
import { nextRetryAt, planDue } from "../../src/schedules/plan";

const t = (text: string) => Date.parse(text);
const iso = (ms: number | null) => (ms === null ? null : new Date(ms).toISOString());

describe("parseCron", () => {
  it("reads five fields in the time zone", () => {
    const cron = cronFor("0 2 * * *", "Europe/Berlin");
    expect(iso(cron.nextAfter(t("2031-07-01T12:00:00Z")))).toBe("2031-07-02T00:00:00.000Z");
    expect(iso(cron.latestAtOrBefore(t("2031-07-02T00:00:00Z")))).toBe("2031-07-02T00:00:00.000Z");
  });

  it("says which field is wrong", () => {
    expect(parseCron("0 2 * * *", "Europe/Nowhere")).toMatchObject({ field: "timezone" });
    expect(parseCron("0 25 * * *", "UTC")).toMatchObject({ field: "cron" });
    expect(parseCron("@reboot", "UTC")).toMatchObject({ field: "cron" });
  });

  it("runs an interval job on both occurrences of the repeated hour (croner's rule)", () => {
    const cron = cronFor("30 * * * *", "Europe/Berlin");
    const after = t("2031-10-26T00:00:00Z");
    const first = cron.nextAfter(after)!;
    const second = cron.nextAfter(first)!;
    expect([iso(first), iso(second)]).toEqual(["2031-10-26T00:30:00.000Z", "2031-10-26T01:30:00.000Z"]);
  });
});

describe("planDue", () => {
  const cron = cronFor("0 2 * * *", "UTC");
  const due = t("2031-03-01T02:00:00Z");

  it("starts a run that is on time or inside the catch-up window", () => {
    expect(planDue(cron, due, due + 5_000)).toEqual({ skips: [], start: due, next: t("2031-03-02T02:00:00Z") });
    expect(planDue(cron, due, due + 30 * 60_000).start).toBe(due);
  });

  it("skips a run past the catch-up window", () => {
    const plan = planDue(cron, due, due + 31 * 60_000);
    expect(plan.start).toBeNull();
    expect(plan.skips).toMatchObject([{ dueAt: due }]);
    expect(plan.next).toBe(t("2031-03-02T02:00:00Z"));
  });

  it("after days without a dispatcher starts nothing stale and records the oldest missed run", () => {
    const plan = planDue(cron, due, t("2031-03-05T12:00:00Z"));
    expect(plan.start).toBeNull();
    expect(plan.skips.map((s) => iso(s.dueAt))).toEqual(["2031-03-01T02:00:00.000Z", "2031-03-05T02:00:00.000Z"]);
  });
});

describe("nextRetryAt", () => {
  it("spaces attempts and stops at the end of the window", () => {
    const due = t("2031-03-01T02:00:00Z");
    expect(nextRetryAt(due, due)).toBe(due + 5 * 60_000);
    expect(nextRetryAt(due, due + 25 * 60_000)).toBe(due + 30 * 60_000);
    expect(nextRetryAt(due, due + 26 * 60_000)).toBeNull();
  });
});
