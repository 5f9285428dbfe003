import { describe, expect, it } from "vitest";
import { newId } from "../../src/lib/ids";
import { BATCH_ROWS, cutoffsAt, nextRound, PRUNE_TABLES, STATEMENT_BUDGET } from "../../src/retention/plan";

const NOW = Date.parse("2031-06-01T12:00:00Z");

describe("cutoffsAt", () => {
  it("puts history RETENTION_DAYS back and sessions at now", () => {
    const c = cutoffsAt(NOW, 90);
    expect(c.before).toBe("2031-03-03T12:00:00.000Z");
    expect(c.beforeMs).toBe(Date.parse(c.before));
    expect(c.day).toBe("2031-03-03");
    expect(c.now).toBe("2031-06-01T12:00:00.000Z");
  });

  it("bounds event ids by time: older ids below, ids of the cutoff moment and later above", () => {
    const c = cutoffsAt(NOW, 90);
    expect(newId("evt", c.beforeMs - 1) < c.eventId).toBe(true);
    expect(newId("evt", c.beforeMs) > c.eventId).toBe(true);
    expect(newId("evt", NOW) > c.eventId).toBe(true);
  });
});

describe("nextRound", () => {
  const full = (table: (typeof PRUNE_TABLES)[number]) => ({ table, deleted: BATCH_ROWS });

  it("prunes every table first", () => {
    expect(nextRound(null, 0)).toEqual([...PRUNE_TABLES]);
  });

  it("then only tables whose batch came back full; a failed or short batch is done for this run", () => {
    const previous = [
      full("lease_events"),
      { table: "schedule_runs" as const, deleted: BATCH_ROWS - 1 },
      { table: "webhook_events" as const, deleted: null },
      full("webhook_deliveries"),
    ];
    expect(nextRound(previous, 7)).toEqual(["lease_events", "webhook_deliveries"]);
  });

  it("never goes past the statement budget", () => {
    expect(nextRound([full("lease_events"), full("lease_billing")], STATEMENT_BUDGET - 1)).toEqual(["lease_events"]);
    expect(nextRound([full("lease_events")], STATEMENT_BUDGET)).toEqual([]);
    expect(nextRound(null, 0, 3)).toHaveLength(3);
  });

  it("a run's statements stay within the budget however large the backlog", () => {
    let used = 0;
    let round = nextRound(null, used);
    while (round.length) {
      used += round.length;
      round = nextRound(round.map(full), used);
    }
    expect(used).toBe(STATEMENT_BUDGET);
  });
});
