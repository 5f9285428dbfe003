import { SELF } from "cloudflare:test";

export const ADMIN_TOKEN = "test-admin-token-0123456789";
export const PROVIDER_SECRETS = [
  "rpa_TESTKEY_runpod_0123456789",
  "vast-test-key-0123456789abcdef",
  "gf_live_testtoken0123456789",
];

/** A request to the worker through its public fetch handler, as the admin by default. */
export async function api(
  path: string,
  init: RequestInit & { json?: unknown; token?: string | null } = {},
): Promise<Response> {
  const headers = new Headers(init.headers);
  const token = init.token === undefined ? ADMIN_TOKEN : init.token;
  if (token) headers.set("Authorization", `Bearer ${token}`);
  let body = init.body;
  if (init.json !== undefined) {
    headers.set("Content-Type", "application/json");
    body = JSON.stringify(init.json);
  }
  return SELF.fetch(new Request(`http://gpulease.test${path}`, { ...init, headers, body }));
}

/** Asserts the error envelope and returns it. */
export async function errorBody(
  res: Response,
): Promise<{ error: string; code: string; issues?: { path: string; message: string }[] }> {
  const body = (await res.json()) as { error: string; code: string; issues?: { path: string; message: string }[] };
  if (typeof body.error !== "string" || typeof body.code !== "string") {
    throw new Error(`not an error envelope: ${JSON.stringify(body)}`);
  }
  return body;
}
