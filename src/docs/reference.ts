import type { Context } from "hono";
import { randomSecret } from "../lib/crypto";
import { contentSecurityPolicy } from "../lib/csp";

/** Where Workers Static Assets serves the reference's browser script (scripts/docs-assets.mjs). */
export const REFERENCE_SCRIPT = "/docs/api-reference.js";

/**
 * What the reference may do in the browser. The script and the document come from this worker
 * only, and it asks nothing of a third party: no default fonts (fonts.scalar.com), no telemetry, no
 * developer toolbar (its Share and Generate SDK post to scalar.com), no AI agent or MCP panels.
 * connect-src 'self' is also what the CSP allows, so any call elsewhere would be refused anyway.
 */
const REFERENCE_CONFIG = {
  url: "/openapi.json",
  withDefaultFonts: false,
  telemetry: false,
  showDeveloperTools: "never",
  agent: { disabled: true },
  mcp: { disabled: true },
} as const;

/**
 * The dashboard's policy, plus one per-response nonce for styles: the reference's script injects its
 * stylesheet as <style> elements and reads the nonce from the page's `csp-nonce` meta to mark them.
 * No 'unsafe-inline' and no 'unsafe-eval': the few inline style attributes it writes (a code block's
 * line count, its toasts' layout) are refused without changing what the page shows, and its zod
 * probes `Function("")` once and falls back when that is refused.
 */
export function referencePolicy(nonce: string): string {
  return contentSecurityPolicy(`'self' 'nonce-${nonce}'`);
}

function attribute(value: string): string {
  return value.replace(/&/g, "&amp;").replace(/"/g, "&quot;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
}

/** The page: no inline script; the configuration rides on a data element the script reads. */
export function referencePage(nonce: string): string {
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta property="csp-nonce" content="${attribute(nonce)}">
<title>gpulease API</title>
</head>
<body>
<script id="api-reference" type="application/json" data-configuration="${attribute(JSON.stringify(REFERENCE_CONFIG))}"></script>
<script src="${REFERENCE_SCRIPT}"></script>
<noscript>The interactive reference needs JavaScript; the document itself is at <a href="/openapi.json">/openapi.json</a>.</noscript>
</body>
</html>
`;
}

/** GET /docs: the reference page under its CSP, a fresh nonce each time. */
export function docsPage(c: Context) {
  const nonce = randomSecret(16);
  c.header("Content-Security-Policy", referencePolicy(nonce));
  c.header("X-Content-Type-Options", "nosniff");
  c.header("Referrer-Policy", "same-origin");
  c.header("Cache-Control", "no-store");
  return c.html(referencePage(nonce));
}
