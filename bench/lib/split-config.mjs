// The worker split in two for a CPU profile that sees one Cloudflare invocation at a time:
// "gpulease-objects" runs the Durable Object classes, and the worker proper binds them from it
// (`script_name`), in another `wrangler dev` process. On Cloudflare a Durable Object call is an
// invocation of its own, billed apart from the Worker's; in one local workerd the objects run in
// the Worker's isolate and thread, so a profile of it counts the objects' work too, and the start
// of a new object (its storage) lands in the calling frame. Both configs are derived from
// wrangler.toml, with absolute paths, into a temporary folder.
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";

export const OBJECTS_SCRIPT = "gpulease-objects";

/** Writes the two configs; returns their paths and the folder they are in (the caller removes it). */
export function writeSplitConfigs(root) {
  const toml = readFileSync(join(root, "wrangler.toml"), "utf8");
  const absolute = toml
    .replace(/^main = "(.+)"$/m, (_, p) => `main = "${resolve(root, p)}"`)
    .replace(/^migrations_dir = "(.+)"$/m, (_, p) => `migrations_dir = "${resolve(root, p)}"`)
    .replace(/^directory = "(.+)"$/m, (_, p) => `directory = "${resolve(root, p)}"`)
    .replace(/^("[^"\n]+") = "(\.\/[^"\n]+)"$/gm, (_, from, to) => `${from} = "${resolve(root, to)}"`);
  // The top-level part, then each [table] or [[array]] with the lines up to the next.
  const sections = absolute.split(/^(?=\[)/m);
  const worker = sections
    .filter((s) => !s.startsWith("[[migrations]]"))
    .map((s) =>
      s.startsWith("[[durable_objects.bindings]]")
        ? s.replace(/(class_name = ".+")/, `$1\nscript_name = "${OBJECTS_SCRIPT}"`)
        : s,
    )
    .join("");
  const objects = sections
    .filter((s) => !s.startsWith("[triggers]") && !s.startsWith("[assets]"))
    .join("")
    .replace(/^name = ".+"$/m, `name = "${OBJECTS_SCRIPT}"`);
  for (const [name, text] of [
    ["worker", worker],
    ["objects", objects],
  ])
    if (!/^main = "\//m.test(text) || (name === "worker" && !text.includes("script_name")))
      throw new Error(`split config ${name}: wrangler.toml's layout is not what bench/lib/split-config.mjs expects`);
  const dir = mkdtempSync(join(tmpdir(), "gpulease-split-"));
  const paths = { dir, worker: join(dir, "worker.toml"), objects: join(dir, "objects.toml") };
  writeFileSync(paths.worker, worker);
  writeFileSync(paths.objects, objects);
  return paths;
}
