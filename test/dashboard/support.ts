import { SELF } from "cloudflare:test";
import { expect } from "vitest";
import { issueToken } from "../auth/tokens-helper";

export const ORIGIN = "http://gpulease.test";

/** A browser's request to the dashboard: same-origin by default, with the session cookie if given. */
export async function browse(
  path: string,
  init: {
    method?: string;
    cookie?: string;
    form?: Record<string, string | string[]>;
    headers?: Record<string, string>;
    origin?: string;
  } = {},
): Promise<Response> {
  const origin = init.origin ?? ORIGIN;
  const headers = new Headers(init.headers);
  if (init.cookie) headers.set("Cookie", `gpulease_session=${init.cookie}`);
  let body: URLSearchParams | undefined;
  if (init.form) {
    body = new URLSearchParams();
    for (const [name, value] of Object.entries(init.form)) {
      for (const v of ([] as string[]).concat(value)) body.append(name, v);
    }
    if (!headers.has("Origin")) headers.set("Origin", origin);
  }
  return SELF.fetch(
    new Request(`${origin}${path}`, {
      method: init.method ?? (init.form ? "POST" : "GET"),
      headers,
      body,
      redirect: "manual",
    }),
  );
}

let addresses = 0;
/**
 * A client address of its own (TEST-NET-2 and beyond): sign-in is limited per address
 * (src/dashboard/sign-in-limits.ts), and a test's sign-ins must not spend another's budget.
 */
export const freshAddress = (): string => `198.51.${100 + Math.floor(addresses / 250)}.${(addresses++ % 250) + 1}`;

/**
 * Signs in (from an address of its own) with `token`, by default a fresh admin-scoped token:
 * sign-in is limited per token too, and ADMIN_TOKEN is one token for the whole file. Returns
 * the cookie value and the raw Set-Cookie header.
 */
export async function signIn(token?: string, origin = ORIGIN): Promise<{ cookie: string; setCookie: string }> {
  const res = await browse("/login", {
    form: { token: token ?? (await issueToken(["admin"], "dashboard")).token, next: "/" },
    origin,
    headers: { "CF-Connecting-IP": freshAddress() },
  });
  expect(res.status).toBe(303);
  const setCookie = res.headers.get("Set-Cookie") ?? "";
  const cookie = /gpulease_session=([^;]+)/.exec(setCookie)?.[1];
  if (!cookie) throw new Error(`no session cookie in ${JSON.stringify(setCookie)}`);
  return { cookie, setCookie };
}

/** The session's anti-forgery value, as a page's forms carry it. */
export async function csrfOf(cookie: string, path = "/"): Promise<string> {
  const html = await (await browse(path, { cookie })).text();
  const value = /name="_csrf" value="([^"]+)"/.exec(html)?.[1];
  if (!value) throw new Error(`no _csrf field on ${path}`);
  return value;
}
