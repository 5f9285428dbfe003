import { spawnSync } from "node:child_process";
import { mkdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..");

/**
 * Bundles a TypeScript entry of bench/lib for Node (esbuild ships with wrangler) into
 * bench/out/<name>.mjs and imports it, so a bench runs the worker's own modules.
 */
export async function importBundled(entry, name) {
  const outDir = join(root, "bench", "out");
  mkdirSync(outDir, { recursive: true });
  const out = join(outDir, `${name}.mjs`);
  const build = spawnSync(
    join(root, "node_modules", ".bin", "esbuild"),
    [
      join(root, "bench", "lib", entry),
      "--bundle",
      "--platform=node",
      "--format=esm",
      `--outfile=${out}`,
      "--log-level=warning",
    ],
    { stdio: "inherit" },
  );
  if (build.status !== 0) throw new Error("esbuild failed");
  return import(`${pathToFileURL(out).href}?t=${Date.now()}`);
}
