// What the deployed script weighs: builds it as `npm run build` does (wrangler deploy --dry-run)
// with esbuild's metafile, prints wrangler's own Total Upload / gzip line, then the size of each
// package and src folder in the bundle (bytes in the output per the metafile; gzip of that
// module's slice of the output on its own, so the gzip column does not add up to the total), the
// top single modules, a few named candidates for cutting, and the same build minified against the
// goal of 250 KiB gzipped (exits 1 over it).
//   node bench/bundle.mjs [top=15]
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { gzipSync } from "node:zlib";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const top = Number(process.argv[2] ?? 15);
const kib = (n) => `${(n / 1024).toFixed(1)} KiB`;

/** One dry-run build: wrangler's size line, the script, its metafile output entry. */
function build(extra = []) {
  const out = mkdtempSync(join(tmpdir(), "gpulease-bundle-"));
  try {
    const run = spawnSync(
      join(root, "node_modules", ".bin", "wrangler"),
      ["deploy", "--dry-run", "--outdir", out, "--metafile", join(out, "meta.json"), ...extra],
      { cwd: root, encoding: "utf8", env: { ...process.env, WRANGLER_SEND_METRICS: "false", CI: "true" } },
    );
    const reported = /Total Upload: .*/.exec(run.stdout + run.stderr)?.[0];
    if (run.status !== 0 || !reported) throw new Error(`wrangler deploy --dry-run failed:\n${run.stdout}${run.stderr}`);
    const script = readFileSync(join(out, "index.js"), "utf8");
    const meta = JSON.parse(readFileSync(join(out, "meta.json"), "utf8"));
    const [, output] = Object.entries(meta.outputs).find(([name]) => name.endsWith("index.js"));
    return { reported, script, output };
  } finally {
    rmSync(out, { recursive: true, force: true });
  }
}

/** "zod", "@hono/zod-openapi", "src/dashboard" or "src/app.ts" for a metafile input path. */
function groupOf(path) {
  const pkg = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(path);
  if (pkg) return pkg[1];
  const rel = path.replace(/^(\.\.\/)*/, "");
  return rel.split("/").slice(0, 2).join("/");
}
const normal = (path) => path.replace(/^.*?node_modules\//, "node_modules/").replace(/^(\.\.\/)+/, "");

// Unminified (wrangler.toml minifies the deployed script), so the output can be sliced per module.
const plain = build(["--no-minify"]);
const inputs = Object.entries(plain.output.inputs).map(([path, v]) => ({ path: normal(path), bytes: v.bytesInOutput }));
const total = Buffer.byteLength(plain.script);
const gzTotal = gzipSync(plain.script, { level: 9 }).length;
if (inputs.length === 0 || total === 0) throw new Error("measured nothing: an empty bundle");

// The unminified output marks each module with a `// path` line: slice it per module.
const slices = new Map();
let current = "(runtime)";
for (const line of plain.script.split("\n")) {
  const marker = /^\/\/ (\S+\.(?:[cm]?[jt]sx?|json))$/.exec(line);
  if (marker) current = normal(marker[1]);
  slices.set(current, `${(slices.get(current) ?? "") + line}\n`);
}
const gz = (paths) => gzipSync(paths.map((p) => slices.get(p) ?? "").join(""), { level: 9 }).length;

const groups = new Map();
for (const input of inputs) {
  const g = groups.get(groupOf(input.path)) ?? { bytes: 0, paths: [] };
  g.bytes += input.bytes;
  g.paths.push(input.path);
  groups.set(groupOf(input.path), g);
}
const row = (name, bytes, paths) =>
  `  ${name.padEnd(60)} ${kib(bytes).padStart(11)} ${((100 * bytes) / total).toFixed(1).padStart(5)} %  gzip alone ${kib(gz(paths)).padStart(10)}`;

console.log(`wrangler: ${plain.reported}`);
console.log(
  `script: ${kib(total)}, gzip -9 ${kib(gzTotal)} (${inputs.length} modules; Free-plan goal ≤ 250 KB gzipped)`,
);
console.log("\nby package / src folder (bytes in the output):");
for (const [name, g] of [...groups].sort((a, b) => b[1].bytes - a[1].bytes).slice(0, top)) {
  console.log(row(name, g.bytes, g.paths));
}
console.log(`\ntop ${top} modules:`);
for (const input of [...inputs].sort((a, b) => b.bytes - a.bytes).slice(0, top)) {
  console.log(row(input.path.replace(/^node_modules\//, ""), input.bytes, [input.path]));
}

// Parts that could go without losing a feature (see the report of this bench for how).
const candidates = [
  ["zod locales (every language's error messages; en is the default)", (p) => p.includes("zod/v4/locales/")],
  [
    "zod JSON Schema conversion (to/from JSON Schema)",
    (p) => /zod\/v4\/(core\/(to-json-schema|json-schema-processors)|classic\/from-json-schema)\.js$/.test(p),
  ],
  ["@scalar/* (API reference page)", (p) => p.includes("node_modules/@scalar/")],
  ["OpenAPI generation (@asteasolutions/zod-to-openapi)", (p) => p.includes("zod-to-openapi/")],
  ["croner", (p) => p.includes("node_modules/croner/")],
  ["src/sim (the simulated cloud, ENABLE_SIM)", (p) => p.startsWith("src/sim/")],
  ["src/dashboard", (p) => p.startsWith("src/dashboard/")],
];
console.log("\ncandidates:");
for (const [label, match] of candidates) {
  const paths = inputs.filter((i) => match(i.path));
  console.log(
    `${row(
      label,
      paths.reduce((s, i) => s + i.bytes, 0),
      paths.map((i) => i.path),
    )}  (${paths.length} modules)`,
  );
}

const minified = build();
console.log(
  `\nas deployed (minify = true in wrangler.toml): ${minified.reported}; gzip -9 ${kib(gzipSync(minified.script, { level: 9 }).length)}`,
);

// The goal: the deployed script ≤ 250 KiB gzipped (wrangler's own figure). zod's other locales are
// out by wrangler.toml's `[alias]` (src/lib/zod-locales.ts); the candidates above show what is left.
const GOAL_GZIP_KIB = 250;
const gzipKib = Number(/gzip: ([\d.]+) KiB/.exec(minified.reported)?.[1]);
if (!Number.isFinite(gzipKib)) {
  console.error(`bundle: no gzip figure in wrangler's line: ${minified.reported}`);
  process.exit(1);
}
console.log(
  `gzipped as deployed: ${gzipKib.toFixed(2)} KiB (goal ≤ ${GOAL_GZIP_KIB} KiB: ${gzipKib <= GOAL_GZIP_KIB ? "met" : "NOT met"})`,
);
if (gzipKib > GOAL_GZIP_KIB) process.exitCode = 1;
