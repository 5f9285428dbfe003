// The dashboard in a real headless Chromium (Debian's package, driven by playwright-core) against the
// local worker with the simulated cloud. Screenshots of every page land in test/e2e/artifacts/.
import { mkdirSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { type Browser, type BrowserContext, chromium, type Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";

const { baseUrl: base, adminToken: admin } = inject("workers").dashboard;
const ARTIFACTS = join(dirname(fileURLToPath(import.meta.url)), "artifacts");
const AXE_SOURCE = readFileSync(createRequire(import.meta.url).resolve("axe-core/axe.min.js"), "utf8");
const DESKTOP = { width: 1280, height: 800 };
const PHONE = { width: 390, height: 844 };

let browser: Browser;
let tourLease: Record<string, unknown> | undefined;
/** The page tour's own admin token: it runs beside the live test, each within its own minute's budget. */
let tourToken: string;
/** console errors and uncaught exceptions of every page the suite opens (the cross-site one excepted) */
const consoleErrors: string[] = [];

async function api(path: string, init: { method?: string; json?: unknown; token?: string } = {}) {
  const res = await fetch(`${base}${path}`, {
    method: init.method ?? (init.json === undefined ? "GET" : "POST"),
    headers: { Authorization: `Bearer ${init.token ?? admin}`, "Content-Type": "application/json" },
    body: init.json === undefined ? undefined : JSON.stringify(init.json),
  });
  if (!res.ok) throw new Error(`${path}: ${res.status} ${await res.text()}`);
  return res.json() as Promise<Record<string, unknown>>;
}

async function newPage(context: BrowserContext): Promise<Page> {
  const page = await context.newPage();
  page.on("console", (msg) => {
    if (msg.type() === "error") consoleErrors.push(`${page.url()}: ${msg.text()}`);
  });
  page.on("pageerror", (error) => consoleErrors.push(`${page.url()}: ${error.message}`));
  return page;
}

async function signIn(context: BrowserContext, token: string): Promise<Page> {
  const page = await newPage(context);
  await page.goto(`${base}/`);
  expect(new URL(page.url()).pathname).toBe("/login");
  await page.getByLabel("API token").fill(token);
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.waitForURL(`${base}/`);
  return page;
}

/** axe-core's serious and critical violations on the page as it is now (`rules`: only these, e.g. contrast). */
async function seriousViolations(page: Page, rules?: string[]): Promise<string[]> {
  if (!(await page.evaluate(() => "axe" in window))) await page.addScriptTag({ content: AXE_SOURCE });
  const results = await page.evaluate(async (only) => {
    type Axe = { run: (ctx: Document, options: object) => Promise<{ violations: unknown[] }> };
    const axe = (window as unknown as { axe: Axe }).axe;
    return axe.run(document, only ? { runOnly: { type: "rule", values: only } } : {});
  }, rules);
  return (results.violations as { id: string; impact: string; nodes: { target: string[] }[] }[])
    .filter((v) => v.impact === "serious" || v.impact === "critical")
    .map((v) => `${v.id} (${v.impact}): ${v.nodes.map((n) => n.target.join(" ")).join(", ")}`);
}

async function shoot(page: Page, name: string) {
  for (const [label, size] of [
    ["desktop", DESKTOP],
    ["phone", PHONE],
  ] as const) {
    await page.setViewportSize(size);
    await page.screenshot({ path: join(ARTIFACTS, `${name}-${label}.png`), fullPage: true });
  }
  await page.setViewportSize(DESKTOP);
}

beforeAll(async () => {
  mkdirSync(ARTIFACTS, { recursive: true });
  // A boot of a minute, as a real provider's is at least, at the default rate limits: the live
  // page must follow it without running into the API's 60 requests a minute.
  await api("/v1/sim/config", { method: "PUT", json: { boot_seconds: 60, ready_seconds: 1, linger_seconds: 1 } });
  tourToken = String((await api("/v1/tokens", { json: { name: "e2e-tour", scopes: ["admin"] } })).token);
  // The every-page tour needs a running lease: it boots while the tour's other pages are drawn.
  tourLease = await api("/v1/leases", {
    json: { provider: "sim", gpu: "4090", max_minutes: 90, max_cost: 2, name: "nightly-embed" },
    token: tourToken,
  });
  browser = await chromium.launch({
    executablePath: "/usr/bin/chromium",
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
  });
});

afterAll(async () => {
  await browser?.close();
  if (tourLease) await api(`/v1/leases/${tourLease.id}/stop`, { method: "POST" });
});

/**
 * The live test and the page tour run side by side (`it.concurrent`): both wait on a sim boot of
 * a minute, the first watching its lease, the second drawing the pages that need no running lease.
 */
describe("the dashboard in a browser", () => {
  it.concurrent("signs in, rents on the sim, sees it run live without a reload, stops it and sees the teardown verified", {
    timeout: 240_000,
  }, async ({ expect }) => {
    const context = await browser.newContext({ viewport: DESKTOP });
    const page = await signIn(context, admin);

    await page.getByRole("link", { name: "Offers" }).click();
    await page.getByLabel("Provider", { exact: true }).selectOption("sim");
    await page.getByLabel("GPU").fill("4090");
    await page.getByRole("button", { name: "Show offers" }).click();
    await page
      .getByRole("link", { name: /^Rent RTX 4090 at sim/ })
      .first()
      .click();
    await page.getByLabel("Name", { exact: false }).first().fill("e2e-watch");
    await page.getByLabel(/Max\. minutes/).fill("30");
    await page.getByRole("button", { name: "Review cost" }).click();
    // the worst case before anything is rented: 0.69 USD/h × (20 min start timeout + 30 min)
    await expect.poll(() => page.locator("#worst-case").textContent()).toBe("$0.58");
    await page.getByRole("button", { name: /^Rent for up to \$0\.58$/ }).click();
    await page.waitForURL(/\/leases\/lse_/);
    const leaseId = new URL(page.url()).pathname.split("/")[2] as string;

    await page.goto(`${base}/`);
    const row = page.locator(`#live-leases tr[data-lease-id="${leaseId}"]`);
    await expect.poll(() => row.count()).toBe(1);
    await page.evaluate(() => {
      (window as unknown as { notReloaded: boolean }).notReloaded = true;
    });
    await row.and(page.locator('[data-status="running"]')).waitFor({ timeout: 120_000 });
    expect(await page.evaluate(() => (window as unknown as { notReloaded?: boolean }).notReloaded)).toBe(true);
    // the cost so far ticks in the page
    const cost = row.locator("[data-cost]");
    const first = await cost.textContent();
    await expect.poll(() => cost.textContent(), { timeout: 5_000 }).not.toBe(first);
    // the access URL, with a copy button the script reveals
    expect(await row.locator("ul.access code").first().textContent()).toMatch(/\/sim\/ollama\/sim-/);
    expect(await row.getByRole("button", { name: /^Copy http/ }).isVisible()).toBe(true);
    // and the OpenAI-compatible base URL of its Ollama server
    expect(await row.getByRole("button", { name: "Copy the OpenAI base URL" }).isVisible()).toBe(true);

    await row.getByRole("button", { name: "Stop", exact: true }).click();
    await page.waitForURL(`${base}/?notice=stopping`);
    const stopped = page.locator(`#live-leases tr[data-lease-id="${leaseId}"][data-status="stopped"]`);
    await stopped.waitFor({ timeout: 120_000 });
    await expect.poll(() => stopped.textContent(), { timeout: 30_000 }).toContain("teardown verified");

    await page.goto(`${base}/leases/${leaseId}`);
    expect(await page.locator("#lease-detail").textContent()).toContain("verified");
    expect(await page.locator("#events").textContent()).toContain("the provider confirms the machine is gone");
    await context.close();
  });

  it.concurrent("every page: no serious or critical axe-core violation in light and dark, screenshots at desktop and phone width", async ({
    expect,
  }) => {
    const lease = tourLease as Record<string, unknown>;
    const schedule = await api("/v1/schedules", {
      json: {
        name: "nightly",
        cron: "0 2 * * *",
        timezone: "Europe/Berlin",
        lease: { provider: "sim", gpu: "4090", max_minutes: 60 },
      },
      token: tourToken,
    });
    // A run of the schedule, so its page draws its runs chart.
    const run = await api(`/v1/schedules/${schedule.id}/run`, { method: "POST", token: tourToken });
    await api("/v1/tokens", { json: { name: "nightly-batch", scopes: ["read", "rent", "stop"] }, token: tourToken });
    await fetch(`${base}/__scheduled?cron=${encodeURIComponent("*/10 * * * *")}`);

    // axe-core is injected as an inline script, which the dashboard's CSP (rightly) refuses
    const context = await browser.newContext({ viewport: DESKTOP, bypassCSP: true, timezoneId: "America/New_York" });
    const login = await newPage(context);
    await login.goto(`${base}/login`);
    expect(await seriousViolations(login)).toEqual([]);
    await shoot(login, "login");
    await login.close();

    const page = await signIn(context, tourToken);
    const tour = async (pages: [string, string][]) => {
      for (const [name, path] of pages) {
        await page.goto(`${base}${path}`);
        // the Spend page and the schedule's page draw their chart (an accessible SVG) with data
        if (name === "account" || name === "schedule") {
          expect(await page.locator('svg[role="img"]').count(), name).toBe(1);
        }
        expect(await seriousViolations(page), `${name} (light)`).toEqual([]);
        // dark mode changes only colours: its contrast is checked
        await page.emulateMedia({ colorScheme: "dark" });
        expect(await seriousViolations(page, ["color-contrast"]), `${name} (dark)`).toEqual([]);
        await page.emulateMedia({ colorScheme: "light" });
        await shoot(page, name);
      }
    };
    // While the tour's lease boots: the pages that do not show it.
    await tour([
      ["offers", "/offers?provider=sim"],
      ["rent", "/rent?provider=sim&gpu=4090"],
      ["schedules", "/schedules"],
      ["schedule", `/schedules/${schedule.id}`],
      ["account", "/account"],
      ["reaper", "/reaper"],
      ["tokens", "/tokens"],
      ["endpoints", "/endpoints"],
    ]);
    // the rent confirmation
    await page.goto(`${base}/rent?provider=sim&gpu=4090`);
    await page.getByLabel(/Max\. minutes/).fill("45");
    await page.getByRole("button", { name: "Review cost" }).click();
    expect(await seriousViolations(page)).toEqual([]);
    await shoot(page, "rent-confirm");

    // Then the leases page with the lease running, and the lease's own page.
    await page.goto(`${base}/`);
    await page.locator(`tr[data-lease-id="${lease.id}"][data-status="running"]`).waitFor({ timeout: 120_000 });
    // times show in the viewer's zone, with UTC on hover
    await page.goto(`${base}/leases/${lease.id}`);
    const created = page.locator("#events time").first();
    expect(await created.textContent()).toMatch(/EST|EDT/);
    expect(await created.getAttribute("title")).toMatch(/^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$/);
    await tour([
      ["leases", "/"],
      ["lease", `/leases/${lease.id}`],
    ]);
    // the leases page in the dark
    await page.emulateMedia({ colorScheme: "dark" });
    await page.goto(`${base}/`);
    await shoot(page, "leases-dark");
    await api(`/v1/leases/${run.id}/stop`, { method: "POST", token: tourToken });
    await context.close();
  }, 180_000);

  it("shows a read-only token no Stop button, and sends its page to sign-in the moment the token is revoked", async () => {
    const lease = await api("/v1/leases", {
      json: { provider: "sim", gpu: "4090", max_minutes: 30, name: "e2e-read" },
    });
    const token = (await api("/v1/tokens", { json: { name: "e2e-reader", scopes: ["read"] } })) as {
      id: string;
      token: string;
    };
    const context = await browser.newContext({ viewport: DESKTOP });
    const page = await signIn(context, token.token);
    await page.locator(`tr[data-lease-id="${lease.id}"]`).waitFor();
    expect(await page.getByRole("button", { name: "Stop" }).count()).toBe(0);
    expect(await page.getByRole("button", { name: "Stop everything" }).count()).toBe(0);
    expect(await page.getByRole("link", { name: "Tokens" }).count()).toBe(0);
    await page.goto(`${base}/leases/${lease.id}`);
    expect(await page.getByRole("button", { name: "Stop" }).count()).toBe(0);

    await page.goto(`${base}/`);
    await api(`/v1/tokens/${token.id}`, { method: "DELETE" });
    // the live stream notices the revocation: no click, no reload by the test
    await page.waitForURL(/\/login\?/, { timeout: 15_000 });
    expect(await page.getByRole("status").textContent()).toContain("Your session has ended");
    await page.goto(`${base}/offers`);
    expect(new URL(page.url()).pathname).toBe("/login");
    await api(`/v1/leases/${lease.id}/stop`, { method: "POST" });
    await context.close();
  });

  it("refuses a cross-site form post even with the admin signed in", async () => {
    const lease = await api("/v1/leases", {
      json: { provider: "sim", gpu: "4090", max_minutes: 30, name: "e2e-csrf" },
    });
    const context = await browser.newContext({ viewport: DESKTOP });
    await (await signIn(context, admin)).close();
    const evil = await context.newPage();
    await evil.route("http://evil.test/**", (route) =>
      route.fulfill({
        contentType: "text/html",
        body: `<form id="f" method="post" action="${base}/stop-all"><input name="confirm" value="STOP ALL"></form>
               <script>document.getElementById("f").submit()</script>`,
      }),
    );
    const refused = evil.waitForResponse((res) => res.url() === `${base}/stop-all`);
    await evil.goto("http://evil.test/");
    expect((await refused).status()).toBe(403);
    const after = await api(`/v1/leases/${lease.id}`);
    expect(after.status).not.toMatch(/stopping|stopped/);
    await api(`/v1/leases/${lease.id}/stop`, { method: "POST" });
    await context.close();
  });

  it("/docs renders the API reference from the worker's own script under its CSP, and nothing leaves the origin", async () => {
    const context = await browser.newContext({ viewport: DESKTOP });
    // Not newPage: the reference's few refused inline style attributes are console errors by design
    // (src/docs/reference.ts); what matters is below.
    const page = await context.newPage();
    const elsewhere: string[] = [];
    page.on("request", (request) => {
      const url = new URL(request.url());
      if (url.protocol !== "data:" && url.origin !== new URL(base).origin) elsewhere.push(request.url());
    });
    const errors: string[] = [];
    page.on("pageerror", (error) => errors.push(error.message));
    await page.addInitScript(() => {
      const seen: { directive: string; blocked: string }[] = [];
      (window as unknown as { violations: typeof seen }).violations = seen;
      document.addEventListener("securitypolicyviolation", (event) =>
        seen.push({ directive: event.effectiveDirective, blocked: event.blockedURI }),
      );
    });
    const script = page.waitForResponse((res) => new URL(res.url()).pathname === "/docs/api-reference.js");
    const res = await page.goto(`${base}/docs`);
    expect(res?.headers()["content-security-policy"]).toContain("script-src 'self';");
    // Served by Workers Static Assets from the copy of the installed package.
    expect((await script).status()).toBe(200);
    // Rendered: the document's title and its tags in the sidebar, styled (the nonce let its styles in).
    await page.getByRole("heading", { name: "gpulease", level: 1 }).waitFor({ timeout: 20_000 });
    await page.getByText("leases", { exact: true }).first().waitFor();
    // A refused <style> has no sheet: thousands of rules mean the nonce let the stylesheet in.
    const rules = await page.evaluate(() => [...document.styleSheets].reduce((n, s) => n + s.cssRules.length, 0));
    expect(rules).toBeGreaterThan(500);
    await page.screenshot({ path: join(ARTIFACTS, "docs-desktop.png") });
    const violations = await page.evaluate(
      () => (window as unknown as { violations: { directive: string; blocked: string }[] }).violations,
    );
    // Refused: only inline styles and zod's one Function("") probe, never a load from anywhere.
    for (const v of violations) expect(["inline", "eval"], JSON.stringify(v)).toContain(v.blocked);
    expect(elsewhere).toEqual([]);
    expect(errors).toEqual([]);
    await context.close();
  });

  it("no page logged a console error", () => {
    expect(consoleErrors).toEqual([]);
  });
});
