import type { z } from "zod";
import { scrubText } from "../lib/scrub";
import { type Sleep, systemSleep } from "../lib/time";
import { USER_AGENT } from "../version";
import type { ProviderName } from "./types";

export type ProviderErrorKind =
  | "timeout" // no answer within the call's timeout
  | "network" // the connection failed
  | "http" // an HTTP status the adapter did not expect
  | "rate_limited" // 429 that outlasted our retries
  | "auth" // 401/403: key missing, wrong or without permission
  | "parse" // the body was empty, not JSON, or not the expected shape
  | "api"; // the provider answered with an application error

/** A provider call that failed. The message is scrubbed of secrets and safe to store and show. */
export class ProviderError extends Error {
  constructor(
    readonly provider: ProviderName,
    readonly kind: ProviderErrorKind,
    message: string,
    readonly status: number | null = null,
  ) {
    super(message);
    this.name = "ProviderError";
  }
}

/** A listing cursor the provider no longer accepts (expired or unknown): list again from the first page. */
export class CursorRefusedError extends ProviderError {
  constructor(provider: ProviderName, message: string, status: number | null) {
    super(provider, "api", message, status);
    this.name = "CursorRefusedError";
  }
}

export interface HttpClientOptions {
  provider: ProviderName;
  /** Sent as `Authorization: Bearer <key>`; never put in a URL. */
  apiKey: string | null;
  fetch?: typeof fetch;
  timeoutMs?: number;
  /** retries after a 429/502/503/504 or a network failure, for idempotent calls */
  retries?: number;
  /** longest wait we accept between retries; a longer Retry-After gives up with rate_limited */
  maxRetryWaitMs?: number;
  sleep?: Sleep;
}

export interface HttpRequest {
  method: "GET" | "POST" | "PUT" | "DELETE";
  url: string;
  body?: unknown;
  /** false for calls that must not be repeated blindly (create): a failure is then ambiguous */
  retry?: boolean;
  /**
   * Total time this call may wait out 429s (Retry-After, else backoff), retried even when
   * `retry` is false: a 429 is refused before anything is processed (runpod/runpodctl
   * `internal/api/retry.go`). A wait past what is left ends the call as `rate_limited` at once.
   * Unset: 429s retry like any other status, each wait capped by the client's `maxRetryWaitMs`.
   */
  rateLimitWaitMs?: number;
  timeoutMs?: number;
}

export interface HttpResponse {
  status: number;
  headers: Headers;
  text: string;
  /** the parsed JSON body, or undefined when the body was empty or not JSON */
  json: unknown;
}

/** How much of a provider's answer an error keeps until its caller scrubs and cuts it to length. */
const PROVIDER_TEXT_CHARS = 8_000;

const RETRY_STATUSES = new Set([429, 502, 503, 504]);

/** The one HTTP client of every provider adapter. */
export class HttpClient {
  readonly provider: ProviderName;
  private readonly apiKey: string | null;
  private readonly fetchImpl: typeof fetch;
  private readonly timeoutMs: number;
  private readonly retries: number;
  private readonly maxRetryWaitMs: number;
  private readonly sleep: Sleep;

  constructor(options: HttpClientOptions) {
    this.provider = options.provider;
    this.apiKey = options.apiKey;
    this.fetchImpl = options.fetch ?? ((input, init) => fetch(input, init));
    this.timeoutMs = options.timeoutMs ?? 15_000;
    this.retries = options.retries ?? 2;
    this.maxRetryWaitMs = options.maxRetryWaitMs ?? 3_000;
    this.sleep = options.sleep ?? systemSleep;
  }

  get configured(): boolean {
    return this.apiKey !== null;
  }

  /** Scrubs provider text of this client's key and anything credential-shaped. */
  scrub(text: string): string {
    // Cut long, not short: what the answer quotes of the request (a lease's env) is scrubbed by
    // the caller, who knows those values, and a value cut in half here would escape it.
    return scrubText(text, [this.apiKey], PROVIDER_TEXT_CHARS);
  }

  error(kind: ProviderErrorKind, message: string, status: number | null = null): ProviderError {
    return new ProviderError(this.provider, kind, this.scrub(message), status);
  }

  /**
   * Sends one request with User-Agent, Content-Type, Bearer key and a timeout; retries
   * 429/502/503/504 with backoff (honouring Retry-After where sent). Returns any other status
   * to the adapter, which knows what it means for that call.
   */
  async send(request: HttpRequest): Promise<HttpResponse> {
    const attempts = this.retries + 1;
    const budget = request.rateLimitWaitMs;
    let waited = 0;
    let lastError: ProviderError | null = null;
    let retryAfterMs: number | null = null;
    for (let attempt = 0; attempt < attempts; attempt++) {
      if (attempt > 0 && lastError) {
        const limited = lastError.kind === "rate_limited";
        if (request.retry === false && !(limited && budget !== undefined)) throw lastError;
        // Vast sends no Retry-After on 429: back off ourselves, longer than for a 5xx.
        const wait = retryAfterMs ?? backoff(attempt) * (limited ? 2 : 1);
        if (limited && budget !== undefined ? waited + wait > budget : wait > this.maxRetryWaitMs) throw lastError;
        waited += wait;
        await this.sleep(wait);
      }
      retryAfterMs = null;
      let response: Response;
      try {
        response = await this.fetchImpl(request.url, this.init(request));
      } catch (cause) {
        lastError = this.transportError(cause);
        continue;
      }
      let text: string;
      try {
        text = await response.text();
      } catch (cause) {
        lastError = this.transportError(cause);
        continue;
      }
      if (RETRY_STATUSES.has(response.status)) {
        lastError = this.error(
          response.status === 429 ? "rate_limited" : "http",
          `HTTP ${response.status}: ${text || response.statusText}`,
          response.status,
        );
        retryAfterMs = parseRetryAfter(response.headers.get("retry-after"));
        continue;
      }
      return { status: response.status, headers: response.headers, text, json: parseJson(text) };
    }
    throw lastError ?? this.error("network", "request failed");
  }

  private init(request: HttpRequest): RequestInit {
    const headers: Record<string, string> = {
      // Workers' fetch sends no User-Agent; RunPod's Cloudflare front answers that with 403 "error code: 1010".
      "User-Agent": USER_AGENT,
      Accept: "application/json",
    };
    if (this.apiKey) headers.Authorization = `Bearer ${this.apiKey}`;
    const init: RequestInit = {
      method: request.method,
      headers,
      signal: AbortSignal.timeout(request.timeoutMs ?? this.timeoutMs),
    };
    if (request.body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(request.body);
    }
    return init;
  }

  private transportError(cause: unknown): ProviderError {
    const name = cause instanceof Error ? cause.name : "";
    if (name === "TimeoutError" || name === "AbortError") {
      return this.error("timeout", "the provider did not answer in time");
    }
    return this.error("network", `connection failed: ${cause instanceof Error ? cause.message : String(cause)}`);
  }

  /**
   * Parses a JSON body with a zod schema; an empty body, non-JSON or a changed shape is a
   * `parse` error, never an empty result.
   */
  parse<T extends z.ZodType>(response: HttpResponse, schema: T, what: string): z.output<T> {
    if (response.json === undefined) {
      throw this.error(
        "parse",
        `${what}: expected JSON, got ${response.text ? `"${response.text}"` : "an empty body"} (HTTP ${response.status})`,
        response.status,
      );
    }
    const parsed = schema.safeParse(response.json);
    if (!parsed.success) {
      const first = parsed.error.issues[0];
      throw this.error(
        "parse",
        `${what}: unexpected shape at ${first?.path.join(".") || "(root)"}: ${first?.message ?? "invalid"}`,
        response.status,
      );
    }
    return parsed.data;
  }

  /** The error for an HTTP status an adapter did not expect, with the provider's text. */
  unexpected(response: HttpResponse, what: string): ProviderError {
    const kind = response.status === 401 || response.status === 403 ? "auth" : "http";
    return this.error(kind, `${what}: HTTP ${response.status}: ${response.text || "(empty body)"}`, response.status);
  }
}

function backoff(attempt: number): number {
  return 250 * 2 ** (attempt - 1);
}

function parseJson(text: string): unknown {
  if (text.trim() === "") return undefined;
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

function parseRetryAfter(value: string | null): number | null {
  if (!value) return null;
  const seconds = Number(value);
  if (Number.isFinite(seconds) && seconds >= 0) return seconds * 1000;
  const date = Date.parse(value);
  return Number.isFinite(date) ? Math.max(0, date - Date.now()) : null;
}
