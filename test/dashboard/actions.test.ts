import { describe, expect, it } from "vitest";
import { issueToken } from "../auth/tokens-helper";
import { api } from "../helpers";
import { browse, csrfOf, signIn } from "./support";

async function leaseStatus(id: string): Promise<string> {
  return ((await (await api(`/v1/leases/${id}`)).json()) as { status: string }).status;
}

describe("dashboard actions go through the API as the signed-in token", () => {
  it("rent: the first step shows the worst case and rents nothing; confirming rents that offer", async () => {
    const { cookie } = await signIn();
    const csrf = await csrfOf(cookie, "/rent");
    const before = ((await (await api("/v1/leases?status=active")).json()) as { leases: unknown[] }).leases.length;
    const review = await browse("/rent", {
      cookie,
      form: { _csrf: csrf, provider: "sim", gpu: "4090", template: "ollama", max_minutes: "40", max_cost: "" },
    });
    expect(review.status).toBe(200);
    const html = await review.text();
    // sim bills from the accepted rental: 0.69 USD/h × (START_TIMEOUT_MIN 20 + 40) min
    expect(html).toContain('id="worst-case">$0.69<');
    expect(html).toContain("20 min start timeout + 40 min");
    const after = ((await (await api("/v1/leases?status=active")).json()) as { leases: unknown[] }).leases.length;
    expect(after).toBe(before);

    const hidden = Object.fromEntries(
      [...html.matchAll(/<input type="hidden" name="([^"]+)" value="([^"]*)"/g)].map((m) => [m[1], m[2]]),
    );
    expect(hidden).toMatchObject({ confirm: "1", provider: "sim", max_minutes: "40" });
    expect(hidden.offer_id).toMatch(/^sim:/);
    const rent = await browse("/rent", { cookie, form: hidden as Record<string, string> });
    expect(rent.status).toBe(303);
    const leaseId = /^\/leases\/(lse_[0-9a-z]+)$/.exec(rent.headers.get("Location") ?? "")?.[1];
    expect(leaseId).toBeDefined();
    const lease = (await (await api(`/v1/leases/${leaseId}`)).json()) as { offer_id: string; max_minutes: number };
    expect(lease).toMatchObject({ offer_id: hidden.offer_id, max_minutes: 40 });

    // the same confirmation posted twice (a double click) rents once
    const twice = await browse("/rent", { cookie, form: hidden as Record<string, string> });
    expect(twice.headers.get("Location")).toBe(`/leases/${leaseId}`);

    const page = await (await browse(`/leases/${leaseId}`, { cookie })).text();
    expect(page).toContain(`data-lease-id="${leaseId}"`);
    const stop = await browse(`/leases/${leaseId}/stop`, { cookie, form: { _csrf: csrf } });
    expect(stop.status).toBe(303);
    expect(stop.headers.get("Location")).toBe(`/leases/${leaseId}?notice=stopping`);
    expect(await leaseStatus(leaseId as string)).toMatch(/stopping|stopped/);
  });

  it("rent: an invalid form is shown again with the API's reason", async () => {
    const { cookie } = await signIn();
    const csrf = await csrfOf(cookie, "/rent");
    const res = await browse("/rent", { cookie, form: { _csrf: csrf, provider: "sim", max_minutes: "0" } });
    expect(res.status).toBe(400);
    const html = await res.text();
    expect(html).toContain("max_minutes");
    expect(html).toContain('name="max_minutes"');
  });

  it("a token without rent cannot rent through the dashboard either", async () => {
    const token = await issueToken(["read", "stop"], "no-rent");
    const { cookie } = await signIn(token.token);
    const csrf = await csrfOf(cookie);
    const res = await browse("/rent", {
      cookie,
      form: { _csrf: csrf, confirm: "1", provider: "sim", gpu: "4090", max_minutes: "10" },
    });
    expect(res.status).toBe(403);
    expect(await res.text()).toContain("rent");
  });

  it("stop-all needs the typed confirmation", async () => {
    const rented = await api("/v1/leases", { method: "POST", json: { provider: "sim", gpu: "4090", max_minutes: 30 } });
    const lease = (await rented.json()) as { id: string };
    const { cookie } = await signIn();
    const csrf = await csrfOf(cookie);
    for (const confirm of ["", "stop all", "STOP"]) {
      const res = await browse("/stop-all", { cookie, form: { _csrf: csrf, confirm } });
      expect(res.headers.get("Location")).toBe("/?notice=stop-all-unconfirmed");
    }
    expect(await leaseStatus(lease.id)).not.toMatch(/stopping|stopped/);
    const res = await browse("/stop-all", { cookie, form: { _csrf: csrf, confirm: "STOP ALL" } });
    expect(res.headers.get("Location")).toBe("/?notice=stop-all");
    expect(await leaseStatus(lease.id)).toMatch(/stopping|stopped/);
  });

  it("tokens: an admin creates one (shown once) and revokes it", async () => {
    const { cookie } = await signIn();
    const csrf = await csrfOf(cookie, "/tokens");
    const created = await browse("/tokens", {
      cookie,
      form: { _csrf: csrf, name: "from-dashboard", scopes: ["read", "stop"] },
    });
    expect(created.status).toBe(201);
    const token = /<code>(gl_[^<]+)<\/code>/.exec(await created.text())?.[1];
    expect(token).toBeDefined();
    const listed = (await (await api("/v1/tokens")).json()) as {
      tokens: { id: string; name: string; scopes: string[] }[];
    };
    const row = listed.tokens.find((t) => t.name === "from-dashboard");
    expect(row?.scopes).toEqual(["read", "stop"]);
    expect((await api("/v1/leases", { token: token as string })).status).toBe(200);
    const revoke = await browse(`/tokens/${row?.id}/revoke`, { cookie, form: { _csrf: csrf } });
    expect(revoke.status).toBe(303);
    expect((await api("/v1/leases", { token: token as string })).status).toBe(401);
  });

  it("schedules: disable, enable and run now", async () => {
    const made = await api("/v1/schedules", {
      method: "POST",
      json: {
        name: "dash-nightly",
        cron: "0 2 * * *",
        timezone: "UTC",
        lease: { provider: "sim", gpu: "4090", max_minutes: 10 },
      },
    });
    expect(made.status).toBe(201);
    const schedule = (await made.json()) as { id: string };
    const { cookie } = await signIn();
    const csrf = await csrfOf(cookie, "/schedules");
    const page = await (await browse("/schedules", { cookie })).text();
    expect(page).toContain(`data-schedule-id="${schedule.id}"`);
    await browse(`/schedules/${schedule.id}/enabled`, { cookie, form: { _csrf: csrf, enabled: "false" } });
    expect(((await (await api(`/v1/schedules/${schedule.id}`)).json()) as { enabled: boolean }).enabled).toBe(false);
    await browse(`/schedules/${schedule.id}/enabled`, { cookie, form: { _csrf: csrf, enabled: "true" } });
    expect(((await (await api(`/v1/schedules/${schedule.id}`)).json()) as { enabled: boolean }).enabled).toBe(true);
    const run = await browse(`/schedules/${schedule.id}/run`, { cookie, form: { _csrf: csrf } });
    expect(run.status, await run.clone().text()).toBe(303);
    const leaseId = /lse_[0-9a-z]+/.exec(run.headers.get("Location") ?? "")?.[0] as string;
    const lease = (await (await api(`/v1/leases/${leaseId}`)).json()) as { schedule_id: string };
    expect(lease.schedule_id).toBe(schedule.id);
    await api(`/v1/leases/${leaseId}/stop`, { method: "POST" });
  });

  it("every page answers for the admin, with no external script or style", async () => {
    const { cookie } = await signIn();
    for (const path of ["/", "/offers", "/rent", "/schedules", "/account", "/reaper", "/tokens"]) {
      const res = await browse(path, { cookie });
      expect(res.status, path).toBe(200);
      expect(res.headers.get("Content-Security-Policy")).toContain("script-src 'self'");
      const html = await res.text();
      expect(html).not.toMatch(/(src|href)="https?:\/\//);
    }
  });
});
