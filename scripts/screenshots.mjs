// Screenshots of the dashboard's Spend page and a schedule's page for the docs: a local worker with
// the simulated cloud, a few real sim leases rented and stopped first (so the charts have data and
// the daily budget line shows), then Debian's headless Chromium at desktop and phone width, light
// and dark. Writes docs/screenshots/{spend,schedule}-{desktop,phone}-{light,dark}.png.
// Run: `node scripts/screenshots.mjs` (needs /usr/bin/chromium).
import { mkdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";
import { startWorker } from "./lib/local-worker.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const out = join(root, "docs", "screenshots");
const SIZES = { desktop: { width: 1280, height: 800 }, phone: { width: 390, height: 844 } };
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// A short start timeout keeps each rental's worst case small, so a low daily budget (drawn as the
// line) still admits them.
const worker = await startWorker({
  sim: true,
  vars: ["--var", "BUDGET_DAILY_USD:0.6", "--var", "START_TIMEOUT_MIN:2", "--var", "POLL_INTERVAL_S:1"],
});
const { json, base, admin } = worker;

async function until(leaseId, statuses) {
  for (let i = 0; i < 120; i++) {
    const lease = await json(`/v1/leases/${leaseId}`);
    if (statuses.includes(lease.status)) return lease;
    await sleep(1000);
  }
  throw new Error(`${leaseId} did not reach ${statuses.join("/")}`);
}

/** Waits until the lease runs, lets it run `seconds`, stops it and waits for the verified teardown. */
async function runFor(lease, seconds) {
  await until(lease.id, ["running"]);
  await sleep(seconds * 1000);
  await json(`/v1/leases/${lease.id}/stop`, { method: "POST" });
  return until(lease.id, ["stopped"]);
}

let browser;
try {
  await json("/v1/sim/config", {
    method: "PUT",
    body: JSON.stringify({ boot_seconds: 2, ready_seconds: 1, linger_seconds: 1 }),
  });
  const big = await json("/v1/leases", {
    method: "POST",
    body: JSON.stringify({ provider: "sim", gpu: "H100", gpu_count: 2, max_minutes: 3, name: "eval-h100" }),
  });
  await runFor(big, 60);
  const small = await json("/v1/leases", {
    method: "POST",
    body: JSON.stringify({ provider: "sim", gpu: "4090", max_minutes: 5, name: "notebook" }),
  });
  await runFor(small, 30);
  const schedule = await json("/v1/schedules", {
    method: "POST",
    body: JSON.stringify({
      name: "nightly-embed",
      cron: "0 2 * * *",
      timezone: "Europe/Berlin",
      lease: { provider: "sim", gpu: "L40S", max_minutes: 5 },
    }),
  });
  for (const seconds of [20, 45, 30]) {
    await runFor(await json(`/v1/schedules/${schedule.id}/run`, { method: "POST" }), seconds);
  }
  // The last run is still going when the pictures are taken.
  const live = await json(`/v1/schedules/${schedule.id}/run`, { method: "POST" });
  await until(live.id, ["running"]);
  await sleep(15_000);

  mkdirSync(out, { recursive: true });
  browser = await chromium.launch({
    executablePath: "/usr/bin/chromium",
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"],
  });
  for (const colorScheme of ["light", "dark"]) {
    for (const [size, viewport] of Object.entries(SIZES)) {
      const context = await browser.newContext({ viewport, colorScheme, timezoneId: "Europe/Berlin" });
      const page = await context.newPage();
      await page.goto(`${base}/login`);
      await page.getByLabel("API token").fill(admin);
      await page.getByRole("button", { name: "Sign in" }).click();
      await page.waitForURL(`${base}/`);
      for (const [name, path] of [
        ["spend", "/account"],
        ["schedule", `/schedules/${schedule.id}`],
      ]) {
        await page.goto(`${base}${path}`);
        const file = join(out, `${name}-${size}-${colorScheme}.png`);
        await page.screenshot({ path: file, fullPage: true });
        console.log(`wrote ${file}`);
      }
      await context.close();
    }
  }
  await json(`/v1/leases/${live.id}/stop`, { method: "POST" });
  await until(live.id, ["stopped"]);
} finally {
  await browser?.close();
  await worker.stop();
}
