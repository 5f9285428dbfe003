import { describe, expect, it } from "vitest";
import { accessRuleFor, isRental, scopeFor } from "../../src/auth/policy";

describe("scopeFor: the central scope table", () => {
  const table: [string, string, string][] = [
    ["GET", "/v1/offers", "read"],
    ["GET", "/v1/offer-types", "read"],
    ["GET", "/v1/leases", "read"],
    ["GET", "/v1/leases/lse_01jb3k8x0m4q7r2s5t6v9w0y1z", "read"],
    ["GET", "/v1/leases/lse_01jb3k8x0m4q7r2s5t6v9w0y1z/events", "read"],
    ["HEAD", "/v1/leases", "read"],
    ["GET", "/v1/schedules", "read"],
    ["GET", "/v1/reaper/runs", "read"],
    ["GET", "/v1/account", "read"],
    ["GET", "/v1/sim/machines", "read"],
    ["GET", "/v1/some-future-route", "read"],
    ["POST", "/v1/leases", "rent"],
    ["POST", "/v1/leases/", "rent"],
    ["POST", "/v1/schedules/sch_01jb3k8x0m4q7r2s5t6v9w0y1z/run", "rent"],
    ["POST", "/v1/leases/lse_01jb3k8x0m4q7r2s5t6v9w0y1z/stop", "stop"],
    ["POST", "/v1/leases/stop-all", "admin"],
    ["GET", "/v1/tokens", "admin"],
    ["POST", "/v1/tokens", "admin"],
    ["DELETE", "/v1/tokens/tok_01jb3k8x0m4q7r2s5t6v9w0y1z", "admin"],
    ["POST", "/v1/schedules", "admin"],
    ["PATCH", "/v1/schedules/sch_01jb3k8x0m4q7r2s5t6v9w0y1z", "admin"],
    ["DELETE", "/v1/schedules/sch_01jb3k8x0m4q7r2s5t6v9w0y1z", "admin"],
    ["POST", "/v1/sim/faults", "admin"],
    ["DELETE", "/v1/sim/machines/m1", "admin"],
    ["POST", "/v1/reaper/run", "admin"],
    ["POST", "/v1/some-future-route", "admin"],
    ["PUT", "/v1/leases", "admin"],
    ["DELETE", "/v1/leases/lse_01jb3k8x0m4q7r2s5t6v9w0y1z", "admin"],
    ["OPTIONS", "/v1/leases", "admin"],
    // Near misses of the rent and stop rules stay closed.
    ["POST", "/v1/leases/lse_01jb3k8x0m4q7r2s5t6v9w0y1z", "admin"],
    ["POST", "/v1/leases/lse_01jb3k8x0m4q7r2s5t6v9w0y1z/stop/now", "admin"],
    ["POST", "/v1/leases/lse_01jb3k8x0m4q7r2s5t6v9w0y1z/done", "admin"],
    ["POST", "/v1/schedules/run", "admin"],
    ["POST", "/v1/schedules/sch_x/run/again", "admin"],
    ["POST", "/v1/leases-extra", "admin"],
    ["POST", "/v2/leases", "admin"],
  ];

  it.each(table)("%s %s needs %s", (method, path, scope) => {
    expect(scopeFor(method, path)).toBe(scope);
  });

  it("ignores the method's case and doubled slashes", () => {
    expect(scopeFor("post", "/v1//leases")).toBe("rent");
    expect(scopeFor("get", "/v1/leases")).toBe("read");
  });
});

describe("isRental", () => {
  it("is true only for creating a lease and running a schedule", () => {
    expect(isRental("POST", "/v1/leases")).toBe(true);
    expect(isRental("POST", "/v1/schedules/sch_1/run")).toBe(true);
    expect(isRental("GET", "/v1/leases")).toBe(false);
    expect(isRental("POST", "/v1/leases/lse_1/stop")).toBe(false);
    expect(isRental("POST", "/v1/leases/stop-all")).toBe(false);
    expect(isRental("POST", "/v1/schedules")).toBe(false);
    expect(accessRuleFor("POST", "/v1/tokens")).toEqual({ scope: "admin", rental: false });
  });
});
