// The typed client's generated files, from the OpenAPI document the worker serves: the document
// itself (client/openapi.json) and its TypeScript types (client/schema.d.ts, openapi-typescript).
// Shared by scripts/generate-client.mjs and the e2e check that they are current.
import openapiTS from "openapi-typescript";

/** @param {object} doc the served document @returns {Promise<{ json: string; dts: string }>} */
export async function clientFiles(doc) {
  const json = `${JSON.stringify(doc, null, 2)}\n`;
  const dts = await openapiTS(JSON.parse(json), { exportType: false });
  return { json, dts };
}
