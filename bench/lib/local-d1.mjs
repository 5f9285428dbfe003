// The local D1 of a `wrangler dev` the benches started, read and written with the sqlite3 command
// (what `startWorker` returns as `persist` is the worker's state folder).
import { spawnSync } from "node:child_process";
import { readdirSync } from "node:fs";
import { join } from "node:path";

/** The D1 database's sqlite file in a worker's state folder. */
export function localD1File(persist) {
  const dir = join(persist, "v3", "d1", "miniflare-D1DatabaseObject");
  const files = readdirSync(dir).filter((f) => f.endsWith(".sqlite") && f !== "metadata.sqlite");
  if (files.length !== 1) throw new Error(`expected one D1 sqlite file in ${dir}, found ${files.join(", ")}`);
  return join(dir, files[0]);
}

/** Runs `sql` on the file (read-only unless `write`); its output, trimmed; throws on a failure. */
export function sqlite(file, sql, { write = false, separator = "|" } = {}) {
  const args = [...(write ? [] : ["-readonly"]), "-separator", separator, file];
  const out = spawnSync("sqlite3", args, { input: sql, encoding: "utf8" });
  if (out.status !== 0) throw new Error(`sqlite3: ${out.stderr.trim()}`);
  return out.stdout.trim();
}
