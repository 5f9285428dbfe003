#!/usr/bin/env node
// `npm start`: local D1 migrated, the simulated cloud on, a local admin token, wrangler dev.
// Extra arguments go to wrangler dev, e.g. `npm start -- --port 8788 --var VAST_API_URL:http://127.0.0.1:9001`.
import { spawn, spawnSync } from "node:child_process";
import { copyFileSync, existsSync, readFileSync } from "node:fs";
import { copyDocsAssets } from "./docs-assets.mjs";

const wrangler = "node_modules/.bin/wrangler";
const env = { ...process.env, WRANGLER_SEND_METRICS: "false" };

if (!existsSync(".dev.vars")) {
  copyFileSync(".dev.vars.example", ".dev.vars");
  console.log("created .dev.vars from .dev.vars.example");
}
copyDocsAssets();
const adminToken = /^ADMIN_TOKEN=(.*)$/m.exec(readFileSync(".dev.vars", "utf8"))?.[1]?.trim();

// CI=true and no stdin: wrangler applies the migrations without its "Ok to proceed?" prompt.
const migrate = spawnSync(wrangler, ["d1", "migrations", "apply", "DB", "--local"], {
  stdio: ["ignore", "inherit", "inherit"],
  env: { ...env, CI: "true" },
});
if (migrate.status !== 0) process.exit(migrate.status ?? 1);

const args = process.argv.slice(2);
const portArg = args.find((a, i) => a.startsWith("--port=") || args[i - 1] === "--port");
const port = portArg?.replace("--port=", "") ?? "8787";
const base = `http://localhost:${port}`;

console.log(`\ngpulease local: admin token "${adminToken ?? "(see .dev.vars)"}"`);
console.log(`  Dashboard: ${base}/  (sign in with the admin token)`);
console.log(`  API:       curl -H "Authorization: Bearer ${adminToken}" ${base}/v1/offers`);
console.log(`  API docs:  ${base}/docs\n`);

// Local receivers are plain http on loopback: allow them in local development only.
const dev = spawn(
  wrangler,
  ["dev", "--test-scheduled", "--var", "ENABLE_SIM:true", "--var", "ALLOW_HTTP_WEBHOOKS:true", ...args],
  { stdio: "inherit", env },
);
for (const signal of ["SIGINT", "SIGTERM"]) process.on(signal, () => dev.kill(signal));
dev.on("exit", (code) => process.exit(code ?? 0));

// wrangler's own output pushes the lines above out of sight: say where to go once it answers.
for (let i = 0; i < 240 && dev.exitCode === null; i++) {
  await new Promise((resolve) => setTimeout(resolve, 500));
  const up = await fetch(`${base}/health`, { signal: AbortSignal.timeout(1_000) }).then(
    (res) => res.ok,
    () => false,
  );
  if (up) {
    console.log(`\n  gpulease is up. Dashboard: ${base}/  ·  API: ${base}/v1  ·  admin token: ${adminToken}\n`);
    break;
  }
}
