#!/usr/bin/env node
// `npm start`: local D1 migrated, the simulated cloud on, a local admin token, wrangler dev.
// Extra arguments go to wrangler dev, e.g. `npm start -- --port 8788 --var VAST_API_URL:http://127.0.0.1:9001`.
import { spawn, spawnSync } from "node:child_process";
import { copyFileSync, existsSync, readFileSync } from "node:fs";

const wrangler = "node_modules/.bin/wrangler";
const env = { ...process.env, WRANGLER_SEND_METRICS: "false" };

if (!existsSync(".dev.vars")) {
  copyFileSync(".dev.vars.example", ".dev.vars");
  console.log("created .dev.vars from .dev.vars.example");
}
const adminToken = /^ADMIN_TOKEN=(.*)$/m.exec(readFileSync(".dev.vars", "utf8"))?.[1]?.trim();

const migrate = spawnSync(wrangler, ["d1", "migrations", "apply", "DB", "--local"], { stdio: "inherit", env });
if (migrate.status !== 0) process.exit(migrate.status ?? 1);

console.log(`\ngpulease local: admin token "${adminToken ?? "(see .dev.vars)"}"`);
console.log(`  curl -H "Authorization: Bearer ${adminToken}" http://localhost:8787/v1/offers\n`);

const dev = spawn(
  wrangler,
  [
    "dev",
    "--test-scheduled",
    "--var",
    "ENABLE_SIM:true",
    "--var",
    "ALLOW_HTTP_WEBHOOKS:true",
    ...process.argv.slice(2),
  ],
  {
    stdio: "inherit",
    env,
  },
);
for (const signal of ["SIGINT", "SIGTERM"]) process.on(signal, () => dev.kill(signal));
dev.on("exit", (code) => process.exit(code ?? 0));
