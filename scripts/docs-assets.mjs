#!/usr/bin/env node
// The API reference's browser script, copied from the installed, pinned @scalar/api-reference
// (package.json) into static/docs/, which Workers Static Assets serves at /docs/api-reference.js
// (wrangler.toml [assets]). Several MB: it cannot be in the worker's script, and it is never fetched
// from a CDN. Run by postinstall, `npm start`, `npm run build`/`deploy`, and the test configs; it
// copies only when the file is missing or differs from the package's.
import { copyFileSync, existsSync, mkdirSync, readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("..", import.meta.url));
const source = `${root}node_modules/@scalar/api-reference/dist/browser/standalone.js`;
const targetDir = `${root}static/docs/`;
const target = `${targetDir}api-reference.js`;

/** Copies the script when it is missing or stale; true when it is in place afterwards. */
export function copyDocsAssets() {
  // An install without the package (it is a dependency, so only a broken install): /docs says so.
  if (!existsSync(source)) {
    console.warn(`docs-assets: ${source} is missing; /docs will not render until npm ci`);
    return false;
  }
  const wanted = readFileSync(source);
  if (existsSync(target) && readFileSync(target).equals(wanted)) return true;
  mkdirSync(targetDir, { recursive: true });
  copyFileSync(source, target);
  return true;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) copyDocsAssets();
