// Two small fixes to the unit-test runtime, applied after `npm ci` / `npm install` (postinstall).
// They touch only code that runs under vitest, never the worker that wrangler bundles. Each patch
// is a literal find-and-replace: when a dependency changes so that the text is gone, the install
// fails here, and the patch must be looked at again (dropped if the upstream fix has landed).
// Figures: docs/architecture.md, "Tests".
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";

const poolDir = fileURLToPath(new URL("../node_modules/@cloudflare/vitest-pool-workers/", import.meta.url));
// An install without dev dependencies (`npm ci --omit=dev`) has no test runtime to patch.
if (!existsSync(poolDir)) process.exit(0);
// The miniflare the pool starts its runtimes with (wrangler keeps its own, untouched).
const poolMiniflare = createRequire(poolDir).resolve("miniflare");

const PATCHES = [
  {
    // Each construction of a Durable Object or entrypoint wrapper wrapped the class's prototype
    // in one more Proxy, so after N constructions (every SELF.fetch, every Durable Object) each
    // method lookup ran N nested `get` traps: the suites slowed down the longer a runtime lived.
    // https://github.com/cloudflare/workers-sdk/issues/15092, fixed upstream by #15106, which is
    // not in 0.23.0. Same fix: install the Proxy once per class.
    file: `${poolDir}dist/worker/lib/cloudflare/test-internal.mjs`,
    find: "\tfunction Class(...args) {\n\t\tClass.prototype = new Proxy(Class.prototype, {",
    replace:
      "\tlet proxied = false;\n\tfunction Class(...args) {\n\t\tif (!proxied) proxied = Class.prototype = new Proxy(Class.prototype, {",
  },
  {
    // The pool talks to each workerd runner over one WebSocket on loopback; ws offers
    // permessage-deflate by default, and compressing and inflating every RPC message took a
    // tenth of the unit run's main-process CPU (node --cpu-prof), for no gain on loopback.
    file: poolMiniflare,
    find: "    const ws = new import_ws2.default(url46, protocols, {\n",
    replace: "    const ws = new import_ws2.default(url46, protocols, {\n      perMessageDeflate: false,\n",
  },
];

for (const { file, find, replace } of PATCHES) {
  const text = readFileSync(file, "utf8");
  if (text.includes(replace)) continue;
  const at = text.indexOf(find);
  if (at === -1 || text.indexOf(find, at + 1) !== -1) {
    console.error(
      `patch-test-deps: the text to patch in ${file} is not there (once); review scripts/patch-test-deps.mjs`,
    );
    process.exit(1);
  }
  writeFileSync(file, text.replace(find, replace));
}
