import { describe, expect, it } from "vitest";
import { nextStrayWorkAt, planStrayCalls, strayDueAt, strayFlag } from "../../src/keeper/plan";
import type { CreateRecord } from "../../src/leases/create-records";
import { machineCreate } from "../support/create-record";
import { keeperTestSettings as s } from "../support/keeper-settings";

const T0 = Date.parse("2031-03-01T00:00:00Z");
const at = (seconds: number) => T0 + seconds * 1000;
const iso = (seconds: number) => new Date(at(seconds)).toISOString();

const stray = (seq: number, over: Partial<CreateRecord> = {}): CreateRecord =>
  ({ ...machineCreate(`p${seq}`, { seq, resolved_at: iso(0) }), ...over }) as CreateRecord;
const all = () => true;

describe("strays are worked by due time, not record order", () => {
  it("a stray never read is due at once; then at the verify pace, a second after a first gone read, slowly once flagged", () => {
    expect(strayDueAt(stray(1), s)).toBe(0);
    const read = { checked_at: iso(100), terminate_sent_at: iso(100), terminates_sent: 1 };
    expect(strayDueAt(stray(1, read), s)).toBe(at(105));
    expect(strayDueAt(stray(1, { ...read, gone_reads: 1 }), s)).toBe(at(101));
    expect(strayDueAt(stray(1, { ...read, terminates_sent: 9, unverified_at: iso(50) }), s)).toBe(at(160));
  });

  it("two strays that never go away cannot starve a third: the one read longest ago goes first", () => {
    const stubborn = [
      stray(1, { checked_at: iso(100), terminate_sent_at: iso(100), terminates_sent: 5 }),
      stray(2, { checked_at: iso(101), terminate_sent_at: iso(101), terminates_sent: 5 }),
    ];
    const third = stray(3, { checked_at: iso(90), terminate_sent_at: iso(90), terminates_sent: 1 });
    const plan = planStrayCalls([...stubborn, third], at(200), s, 2, all);
    expect(plan.map((c) => c.stray.seq)).toEqual([3]);
    expect(plan[0]).toMatchObject({ terminate: true, status: true });
  });

  it("the budget is never exceeded, and a stray gets its terminate before its read", () => {
    const strays = [1, 2, 3, 4].map((seq) => stray(seq));
    const plan = planStrayCalls(strays, at(0), s, 3, all);
    const calls = plan.reduce((n, c) => n + Number(c.terminate) + Number(c.status), 0);
    expect(calls).toBe(3);
    expect(plan.map((c) => [c.stray.seq, c.terminate, c.status])).toEqual([
      [1, true, true],
      [2, true, false],
    ]);
  });

  it("a stray without a provider gets no calls, and is looked at at the slow pace", () => {
    const keyless = stray(1);
    expect(planStrayCalls([keyless], at(0), s, 2, () => false)).toEqual([]);
    expect(nextStrayWorkAt([keyless], at(0), s, () => false)).toBe(at(60));
    expect(nextStrayWorkAt([], at(0), s, all)).toBeNull();
  });
});

describe("strayFlag", () => {
  const lease = { stop_requested_at: iso(0) };
  it("flags a stray whose provider has no key at once", () => {
    expect(strayFlag(lease, stray(1), at(1), s, true)?.kind).toBe("teardown_unverified");
  });
  it("flags a stray not gone within the teardown window, once", () => {
    expect(strayFlag(lease, stray(1), at(599), s, false)).toBeNull();
    expect(strayFlag(lease, stray(1), at(600), s, false)?.detail).toContain("not confirmed gone after 10 minutes");
    expect(strayFlag(lease, stray(1, { unverified_at: iso(600) }), at(700), s, false)).toBeNull();
    expect(strayFlag(lease, stray(1, { gone_at: iso(300) }), at(700), s, false)).toBeNull();
  });
  it("counts from the later of the stray's record and the lease's stop", () => {
    expect(strayFlag({ stop_requested_at: iso(500) }, stray(1), at(700), s, false)).toBeNull();
    expect(
      strayFlag({ stop_requested_at: null }, stray(1, { resolved_at: iso(200) }), at(800), s, false),
    ).not.toBeNull();
  });
});
