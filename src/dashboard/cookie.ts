import type { Context } from "hono";
import { deleteCookie, getCookie, setCookie } from "hono/cookie";

export const SESSION_COOKIE = "gpulease_session";

/** Browsers keep `Secure` cookies only over https, except for these loopback hosts during development. */
export function isLoopback(url: string): boolean {
  const host = new URL(url).hostname;
  return host === "localhost" || host.endsWith(".localhost") || host === "127.0.0.1" || host === "[::1]";
}

const attributes = (c: Context) => ({
  path: "/",
  httpOnly: true,
  sameSite: "Strict" as const,
  secure: !isLoopback(c.req.url),
});

export function readSessionCookie(c: Context): string | undefined {
  return getCookie(c, SESSION_COOKIE);
}

export function writeSessionCookie(c: Context, value: string, maxAgeS: number): void {
  setCookie(c, SESSION_COOKIE, value, { ...attributes(c), maxAge: maxAgeS });
}

export function clearSessionCookie(c: Context): void {
  deleteCookie(c, SESSION_COOKIE, attributes(c));
}
