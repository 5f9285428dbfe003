// @ts-check
// The CLI's one way to the API: the package's typed client, plus the error every command maps
// to exit code 1.
import { createGpuleaseClient } from "../client/index.mjs";

/** The API answered with an error envelope (or could not be reached): exit code 1. */
export class ApiFailure extends Error {
  /** @param {string} code @param {string} message @param {number | null} status */
  constructor(code, message, status) {
    super(message);
    this.code = code;
    this.status = status;
  }
}

/** A usage problem (bad flag, missing setting): exit code 2. */
export class UsageError extends Error {}

/** @returns {{ url: string; token: string }} */
export function settings() {
  const url = (process.env.GPULEASE_URL || "http://localhost:8787").replace(/\/+$/, "");
  const token = process.env.GPULEASE_TOKEN;
  if (!token) throw new UsageError("GPULEASE_TOKEN is not set (an API token, or the worker's ADMIN_TOKEN)");
  try {
    new URL(url);
  } catch {
    throw new UsageError(`GPULEASE_URL is not a URL: ${url}`);
  }
  return { url, token };
}

/** @param {{ url: string; token: string }} s */
export function clientFor(s) {
  return createGpuleaseClient({
    baseUrl: s.url,
    token: s.token,
    headers: { "User-Agent": "gpulease-cli" },
    fetch: patientFetch(fetch, (note) => process.stderr.write(`${note}\n`)),
  });
}

/** At most this many waits for one request, so a misconfigured worker cannot hold the CLI forever. */
const MAX_WAITS = 20;

/**
 * `fetch` that waits out a 429 for as long as its `Retry-After` says (a note on stderr) and sends
 * the request again: a refused request was not performed, so repeating it, a rent included, is safe.
 * @param {typeof fetch} send @param {(note: string) => void} note
 * @param {(ms: number) => Promise<void>} [sleep]
 * @returns {typeof fetch}
 */
export function patientFetch(send, note, sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))) {
  return async (input, init) => {
    const request = new Request(input, init);
    for (let waits = 0; ; waits++) {
      const response = await send(request.clone());
      if (response.status !== 429 || waits >= MAX_WAITS) return response;
      const seconds = retryAfterSeconds(response.headers.get("retry-after"));
      await response.body?.cancel();
      note(`rate limited by the worker: waiting ${seconds} s (Retry-After), then going on`);
      await sleep(seconds * 1000);
    }
  };
}

/** Retry-After in whole seconds (delta or HTTP date); 1 when it is missing or unreadable. @param {string | null} value */
function retryAfterSeconds(value) {
  if (!value) return 1;
  const delta = Number(value);
  if (Number.isFinite(delta)) return Math.max(1, Math.ceil(delta));
  const at = Date.parse(value);
  return Number.isFinite(at) ? Math.max(1, Math.ceil((at - Date.now()) / 1000)) : 1;
}

/**
 * Awaits an openapi-fetch call and returns its data, or throws ApiFailure with the API's own
 * code and sentence.
 * @template {{ data?: unknown; error?: unknown; response: Response }} R
 * @param {Promise<R>} pending
 * @param {string} url for the message when the worker cannot be reached
 * @returns {Promise<NonNullable<R["data"]>>}
 */
export async function call(pending, url) {
  let result;
  try {
    result = await pending;
  } catch (error) {
    const cause = error instanceof Error && error.cause instanceof Error ? error.cause.message : String(error);
    throw new ApiFailure("unreachable", `cannot reach ${url}: ${cause}`, null);
  }
  const { data, error, response } = result;
  if (!response.ok || error !== undefined) {
    const body = /** @type {{ code?: unknown; error?: unknown }} */ (error ?? {});
    const code = typeof body.code === "string" ? body.code : `http_${response.status}`;
    const message = typeof body.error === "string" ? body.error : `HTTP ${response.status} ${response.statusText}`;
    throw new ApiFailure(code, message, response.status);
  }
  return /** @type {NonNullable<R["data"]>} */ (data);
}

/**
 * The event list of GET /v1/leases/{id}/events (documented with a JSON and an SSE body).
 * @template T @param {T} data @returns {Exclude<T, string>}
 */
export function jsonOnly(data) {
  if (typeof data === "string") throw new ApiFailure("unexpected_body", "expected JSON, got an event stream", null);
  return /** @type {Exclude<T, string>} */ (data);
}
