import { describe, expect, it } from "vitest";
import { issueToken } from "../auth/tokens-helper";
import { api } from "../helpers";
import { browse, csrfOf, freshAddress, ORIGIN, signIn } from "./support";

/** Signs in with `next` as the form carries it; a token and an address of its own (sign-in is rate-limited). */
async function signInTo(next: string): Promise<Response> {
  const { token } = await issueToken(["read"], "next");
  return browse("/login", { form: { token, next }, headers: { "CF-Connecting-IP": freshAddress() } });
}

/**
 * `next` spellings that a browser resolves to another origin (or to no page at all): it drops
 * tabs and newlines, reads "\" as "/" and trims leading spaces. Each as the form sends it.
 */
const FOREIGN = [
  "/\t/evil.example",
  "/\n/evil.example",
  "/\r\n/evil.example/phish",
  "\\\\evil.example",
  "/\\evil.example",
  "\\/evil.example",
  "//evil.example",
  "///evil.example",
  " //evil.example",
  "https:evil.example",
  "https://evil.example/",
  "http://gpulease.test@evil.example/",
  "javascript:alert(1)",
  "java\tscript:alert(1)",
  "data:text/html,<script>alert(1)</script>",
  "/.//evil.example",
  "/%2e//evil.example",
];

/** Where a browser goes when it follows this Location from the dashboard. */
const followed = (location: string | null) => new URL(location ?? "", `${ORIGIN}/login`);

function expectHome(location: string | null, next: string) {
  expect(followed(location).origin, JSON.stringify(next)).toBe(ORIGIN);
  expect(location, JSON.stringify(next)).toBe("/");
}

describe("where sign-in sends the browser", () => {
  it("never to another origin, however `next` is spelled", async () => {
    for (const next of FOREIGN) {
      const res = await signInTo(next);
      expect(res.status).toBe(303);
      expectHome(res.headers.get("Location"), next);
    }
  });

  it("not by a percent-encoded tab or backslash in the sign-in link either", async () => {
    // The query decodes %09 to a tab and %5c to "\" before the form is rendered and posted back.
    for (const query of ["/%09/evil.example/phish", "/%0a/evil.example", "/%5cevil.example", "%5c%5cevil.example"]) {
      const page = await (await browse(`/login?next=${query}`)).text();
      const next = /name="next" value="([^"]*)"/.exec(page)?.[1] ?? "";
      const decoded = next.replace(/&#(\d+);/g, (_, code) => String.fromCharCode(Number(code)));
      const res = await signInTo(decoded);
      expectHome(res.headers.get("Location"), query);
    }
  });

  it("to a same-origin path, keeping its query and fragment", async () => {
    for (const [next, location] of [
      ["/leases?x=1#y", "/leases?x=1#y"],
      ["/reaper", "/reaper"],
      // a leading space is trimmed by the browser too; what is left is a plain path
      [" /offers", "/offers"],
      // the browser's own resolution of dot segments
      ["/a/../offers", "/offers"],
    ] as const) {
      const res = await signInTo(next);
      expect(res.headers.get("Location"), next).toBe(location);
    }
  });
});

describe("the stop form's way back", () => {
  it("stays on the dashboard", async () => {
    const rented = await api("/v1/leases", { method: "POST", json: { provider: "sim", gpu: "4090", max_minutes: 30 } });
    expect(rented.status).toBe(202);
    const { id } = (await rented.json()) as { id: string };
    const { cookie } = await signIn();
    const csrf = await csrfOf(cookie);
    for (const next of ["/\t/evil.example", "/\\evil.example", "//evil.example", "/.//evil.example"]) {
      const res = await browse(`/leases/${id}/stop`, { cookie, form: { _csrf: csrf, next } });
      expect(res.status).toBe(303);
      const location = res.headers.get("Location");
      expect(followed(location).origin, JSON.stringify(next)).toBe(ORIGIN);
      expect(location, JSON.stringify(next)).toMatch(/^\/\?notice=/);
    }
    const back = await browse(`/leases/${id}/stop`, { cookie, form: { _csrf: csrf, next: "/?x=1#top" } });
    expect(back.headers.get("Location")).toBe("/?x=1&notice=already#top");
  });
});
