// Regenerates client/openapi.json and client/schema.d.ts from a local worker's /openapi.json.
// Run after changing a route: `node scripts/generate-client.mjs` (npm run client:generate).
import { writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { clientFiles } from "./lib/client-files.mjs";
import { startWorker } from "./lib/local-worker.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const worker = await startWorker({ sim: true });
try {
  const doc = await (await fetch(`${worker.base}/openapi.json`)).json();
  const { json, dts } = await clientFiles(doc);
  writeFileSync(join(root, "client", "openapi.json"), json);
  writeFileSync(join(root, "client", "schema.d.ts"), dts);
  console.log("wrote client/openapi.json and client/schema.d.ts");
} finally {
  await worker.stop();
}
