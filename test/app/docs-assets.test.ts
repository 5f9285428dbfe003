import { readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
// @ts-expect-error: plain ESM script, also run on its own by npm scripts; no type declarations
import { copyDocsAssets } from "../../scripts/docs-assets.mjs";
import { REFERENCE_SCRIPT } from "../../src/docs/reference";

// The unit runtime's SELF.fetch does not reach static assets (vitest-pool-workers 0.23), so what
// Workers Static Assets will serve is checked here on disk; test/e2e/dashboard.test.ts loads it in a browser.
const root = join(import.meta.dirname, "..", "..");
const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8"));
const version: string = pkg.dependencies["@scalar/api-reference"];

describe("the API reference's script, from the installed package into static assets", () => {
  it("is pinned to one exact version", () => {
    expect(version).toMatch(/^\d+\.\d+\.\d+$/);
    const installed = JSON.parse(
      readFileSync(join(root, "node_modules", "@scalar", "api-reference", "package.json"), "utf8"),
    );
    expect(installed.version).toBe(version);
  });

  it("is copied byte for byte where the page loads it from, and that file is the installed version's", () => {
    expect(copyDocsAssets()).toBe(true);
    const served = readFileSync(join(root, "static", REFERENCE_SCRIPT));
    const source = readFileSync(
      join(root, "node_modules", "@scalar", "api-reference", "dist", "browser", "standalone.js"),
    );
    expect(served.equals(source)).toBe(true);
    expect(served.toString("utf8")).toContain(`@scalar/api-reference@${version}`);
    // Workers Static Assets serves files up to 25 MiB.
    expect(statSync(join(root, "static", REFERENCE_SCRIPT)).size).toBeLessThan(25 * 1024 * 1024);
  });

  it("is served from static/ by wrangler.toml [assets], with nosniff, and leaves every other path to the worker", () => {
    const wrangler = readFileSync(join(root, "wrangler.toml"), "utf8");
    const assets = /^\[assets\]\n((?:[a-z_]+ = .*\n)+)/m.exec(wrangler)?.[1] ?? "";
    expect(assets).toContain('directory = "./static"');
    expect(assets).toContain('not_found_handling = "none"');
    expect(assets).not.toContain("run_worker_first");
    const headers = readFileSync(join(root, "static", "_headers"), "utf8");
    expect(headers).toMatch(/^\/docs\/\*\n\s+X-Content-Type-Options: nosniff$/m);
  });
});
