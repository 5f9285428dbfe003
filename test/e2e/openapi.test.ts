import { execFile } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import { expect, inject, test } from "vitest";
// @ts-expect-error: plain ESM helper shared with scripts/generate-client.mjs
import { clientFiles } from "../../scripts/lib/client-files.mjs";

const root = join(import.meta.dirname, "..", "..");
const run = promisify(execFile);

async function servedDocument(): Promise<object> {
  const res = await fetch(`${inject("workers").cli.baseUrl}/openapi.json`);
  expect(res.status).toBe(200);
  return (await res.json()) as object;
}

test("the committed typed client matches the document the worker serves (npm run client:generate)", async () => {
  const { json, dts } = (await clientFiles(await servedDocument())) as { json: string; dts: string };
  expect(readFileSync(join(root, "client", "openapi.json"), "utf8")).toBe(json);
  expect(readFileSync(join(root, "client", "schema.d.ts"), "utf8")).toBe(dts);
});

test("every operation has a unique operationId and declares security (empty on the open routes)", async () => {
  const doc = (await servedDocument()) as {
    servers?: unknown[];
    info: { license?: unknown };
    paths: Record<string, Record<string, { operationId?: string; security?: unknown[] }>>;
  };
  expect(doc.servers?.length).toBeGreaterThan(0);
  expect(doc.info.license).toBeDefined();
  const ids: string[] = [];
  for (const [path, item] of Object.entries(doc.paths)) {
    for (const [method, operation] of Object.entries(item)) {
      expect(operation.operationId, `${method} ${path}`).toMatch(/^[a-z][A-Za-z]+$/);
      ids.push(operation.operationId as string);
      expect(operation.security, `${method} ${path}`).toEqual(path.startsWith("/v1/") ? [{ Bearer: [] }] : []);
    }
  }
  expect(new Set(ids).size).toBe(ids.length);
});

test("redocly lint (recommended rules) reports 0 errors and 0 warnings on the served document", async () => {
  // client/openapi.json is byte-for-byte the served document (checked above).
  const redocly = join(root, "node_modules", ".bin", "redocly");
  const { stdout, stderr } = await run(
    redocly,
    ["lint", "--extends", "recommended", "--format", "json", "client/openapi.json"],
    { cwd: root, env: { ...process.env, REDOCLY_TELEMETRY: "off", REDOCLY_SUPPRESS_UPDATE_NOTICE: "true" } },
  );
  const report = JSON.parse(stdout) as { totals: { errors: number; warnings: number; ignored: number } };
  console.log(`redocly lint: ${JSON.stringify(report.totals)}${stderr.includes("error") ? `\n${stderr}` : ""}`);
  expect(report.totals).toMatchObject({ errors: 0, warnings: 0 });
});
