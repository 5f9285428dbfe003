import type { Context } from "hono";
import { createMiddleware } from "hono/factory";
import { resumeSession } from "../auth/sessions";
import { secretsEqual } from "../lib/crypto";
import { clearSessionCookie, readSessionCookie } from "./cookie";
import type { DashEnv } from "./env";

/** A `next` longer than this is not followed (no page of the dashboard needs one). */
const NEXT_MAX = 500;

/**
 * Where to send the browser after sign-in or a stop: `next` resolved as the browser itself will
 * resolve it (WHATWG URL: tabs and newlines dropped, "\\" read as "/", spaces trimmed), kept only
 * when that lands on this dashboard's own origin; anything else is "/". Checking the raw string
 * is not enough: "/\t/evil.example" passes a prefix test and the browser follows "//evil.example".
 */
export function safeNext(next: string | undefined | null, dashboardOrigin: string): string {
  if (!next || next.length > NEXT_MAX) return "/";
  let url: URL;
  try {
    url = new URL(next, dashboardOrigin);
  } catch {
    return "/";
  }
  if (url.origin !== dashboardOrigin) return "/";
  // "/.//evil.example" resolves on this origin to the path "//evil.example", which as a Location
  // is another host again.
  if (url.pathname.startsWith("//")) return "/";
  return `${url.pathname}${url.search}${url.hash}`;
}

/** The dashboard's own origin, as the browser sees it. */
export const dashboardOrigin = (c: Context): string => new URL(c.req.url).origin;

/** Sends the browser to sign-in, saying why and where to come back to. */
export function toLogin(c: Context, why: "expired" | "required") {
  const url = new URL(c.req.url);
  const back = c.req.method === "GET" ? `${url.pathname}${url.search}` : "/";
  const query = new URLSearchParams({ next: back });
  if (why === "expired") query.set("expired", "1");
  return c.redirect(`/login?${query}`, 303);
}

/** Every dashboard page and action: a live session, or off to sign-in (a stale cookie is cleared). */
export const requireSession = createMiddleware<DashEnv>(async (c, next) => {
  const cookie = readSessionCookie(c);
  const session = await resumeSession(c.get("services"), cookie);
  if (!session) {
    if (cookie) clearSessionCookie(c);
    return toLogin(c, cookie ? "expired" : "required");
  }
  c.set("session", session);
  c.set("caller", session.caller);
  await next();
});

/**
 * A state-changing request from another site is refused: the browser says where it comes from
 * (Sec-Fetch-Site, Origin), and SameSite=Strict keeps the cookie off such requests anyway.
 */
export function crossSite(c: Context): boolean {
  const site = c.req.header("sec-fetch-site");
  if (site && site !== "same-origin" && site !== "none") return true;
  const origin = c.req.header("origin");
  return origin !== undefined && origin !== new URL(c.req.url).origin;
}

/** Posted forms: same origin, and the session's anti-forgery value echoed in `_csrf`. */
export const requireSameSiteForm = createMiddleware<DashEnv>(async (c, next) => {
  if (crossSite(c)) return c.text("cross-site form posts are refused", 403);
  const form = await c.req.parseBody();
  const given = typeof form._csrf === "string" ? form._csrf : "";
  if (!given || !(await secretsEqual(given, c.get("session").csrf))) {
    return c.text("this form has expired or did not come from this dashboard; reload the page and try again", 403);
  }
  await next();
});
