import { SELF } from "cloudflare:test";
import { describe, expect, it } from "vitest";

/** The directives of a Content-Security-Policy header, by name. */
function directives(policy: string): Map<string, string[]> {
  return new Map(
    policy
      .split(";")
      .map((part) => part.trim().split(/\s+/))
      .filter((words) => words[0])
      .map(([name, ...sources]) => [name as string, sources]),
  );
}

async function docs() {
  const res = await SELF.fetch("https://gpulease.example/docs");
  expect(res.status).toBe(200);
  return { res, html: await res.text() };
}

describe("GET /docs: the API reference, self-hosted under a CSP", () => {
  it("allows scripts from this origin only, styles from it or the page's nonce, and nothing inline or eval'd", async () => {
    const { res, html } = await docs();
    const policy = res.headers.get("content-security-policy") ?? "";
    const csp = directives(policy);
    expect(csp.get("default-src")).toEqual(["'none'"]);
    expect(csp.get("script-src")).toEqual(["'self'"]);
    expect(csp.get("connect-src")).toEqual(["'self'"]);
    expect(csp.get("frame-ancestors")).toEqual(["'none'"]);
    expect(csp.get("base-uri")).toEqual(["'none'"]);
    const styles = csp.get("style-src") ?? [];
    expect(styles[0]).toBe("'self'");
    const nonce = /^'nonce-([A-Za-z0-9_-]{22})'$/.exec(styles[1] ?? "")?.[1];
    expect(nonce, policy).toBeDefined();
    expect(styles).toHaveLength(2);
    expect(policy).not.toMatch(/unsafe-inline|unsafe-eval|\*|https?:/);
    // The reference's script marks the <style> elements it injects with the nonce of this meta.
    expect(html).toContain(`<meta property="csp-nonce" content="${nonce}">`);
    expect(res.headers.get("x-content-type-options")).toBe("nosniff");
    expect(res.headers.get("cache-control")).toBe("no-store");
  });

  it("names no other origin: one script from /docs/, no inline script, the document at /openapi.json", async () => {
    const { html } = await docs();
    expect(html).not.toMatch(/https?:\/\/|\/\/[a-z0-9.-]+\.[a-z]{2,}/i);
    const scripts = [...html.matchAll(/<script\b([^>]*)>([\s\S]*?)<\/script>/g)];
    expect(scripts.map(([, attrs]) => /\bsrc="([^"]*)"/.exec(attrs ?? "")?.[1]).filter(Boolean)).toEqual([
      "/docs/api-reference.js",
    ]);
    // The configuration is data: a JSON script element the browser never runs, and it is empty.
    for (const [, attrs, body] of scripts) {
      expect(body?.trim(), attrs).toBe("");
      if (!/\bsrc=/.test(attrs ?? "")) expect(attrs).toContain('type="application/json"');
    }
    const config = JSON.parse(
      (/data-configuration="([^"]*)"/.exec(html)?.[1] ?? "").replaceAll("&quot;", '"').replaceAll("&amp;", "&"),
    );
    expect(config).toMatchObject({
      url: "/openapi.json",
      withDefaultFonts: false,
      telemetry: false,
      showDeveloperTools: "never",
      agent: { disabled: true },
      mcp: { disabled: true },
    });
  });

  it("gives every response its own nonce", async () => {
    const nonces = new Set<string | null>();
    for (let i = 0; i < 3; i++) nonces.add((await docs()).res.headers.get("content-security-policy"));
    expect(nonces.size).toBe(3);
  });
});
