import { type Context, Hono } from "hono";
import { callerForToken, hasScope } from "../auth/middleware";
import { ApiError } from "../errors";
import { getLease, type LeaseRow } from "../leases/ledger";
import { bearerToken, secretsEqual, sha256Hex } from "../lib/crypto";
import type { AppEnv, Services } from "../services";
import { inDialect } from "./error-shape";
import { forwardedHeaders } from "./forward-headers";
import { machineSender } from "./machine-fetch";
import { checkedRequest } from "./request-checks";
import { InjectedUsageFilter, withStreamUsage } from "./stream-usage";
import { UsageReader, type UsageSample } from "./usage";

/** The routes a key holder may reach on the machine; anything that changes the server's models is not one. */
const OPENAI_ROUTES = new Set(["chat/completions", "completions", "embeddings", "models"]);
const OLLAMA_ROUTES = new Set(["generate", "chat", "embed", "embeddings", "tags", "ps", "show", "version"]);
const OLLAMA_REFUSED = new Set(["pull", "push", "delete", "create", "copy", "blobs"]);

/**
 * The LLM gateway: `/llm/{lease_id}/v1/…` (OpenAI-compatible) and `/llm/{lease_id}/api/…`
 * (Ollama) forwarded to a running model lease's machine, streams passed through as they come,
 * every request counted (docs/architecture.md, "LLM gateway").
 */
export const gatewayRoutes = new Hono<AppEnv>().all("/llm/:leaseId/*", (c) => {
  const rest = c.req.path.slice(`/llm/${c.req.param("leaseId")}/`.length).replace(/\/+$/, "");
  // Errors in the shape of the caller's API: OpenAI's on /v1, Ollama's on /api (error-shape.ts).
  return inDialect(rest, () => serve(c, rest));
});

async function serve(c: Context<AppEnv, "/llm/:leaseId/*">, rest: string): Promise<Response> {
  const services = c.get("services");
  const leaseId = c.req.param("leaseId");
  const lease = /^lse_[0-9a-z]{22}$/.test(leaseId) ? await getLease(services.db, leaseId) : null;
  if (lease?.template !== "ollama" || !lease.spec.model) throw new ApiError("not_found", "no such model lease");
  const caller = await authorize(services, lease, c.req.header("Authorization"));
  const route = routeOf(rest);
  if (route === "refused")
    throw new ApiError("forbidden", "this Ollama route changes the server's models: not through the gateway");
  if (route === null) throw new ApiError("not_found", `no gateway route /${rest}`);
  await limit(services, caller);
  if (lease.status !== "running") throw new ApiError("lease_not_running", `the lease is ${lease.status}`);
  const base = lease.access?.urls[0];
  if (!base) throw new ApiError("lease_not_running", "the lease's machine has no address yet");
  const send = machineSender(services, lease.provider);
  const target = `${base.replace(/\/+$/, "")}/${rest}${new URL(c.req.url).search}`;
  const request = await checkedRequest(c.req.raw, rest, lease.spec.model.context_length);
  return forward(send, request, target, (sample) =>
    c.executionCtx.waitUntil(services.keepers.recordUsage(lease.id, sample).catch(() => undefined)),
  );
}

/** `v1/<openai route>` or `api/<ollama route>`; "refused" for Ollama's model-changing routes. */
export function routeOf(rest: string): "openai" | "ollama" | "refused" | null {
  const [root, ...tail] = rest.split("/");
  const name = tail.join("/");
  // `models/{id}`: the openai client's models.retrieve (Ollama's GET /v1/models/:model).
  if (root === "v1") return OPENAI_ROUTES.has(name) || /^models\/[^/]+$/.test(name) ? "openai" : null;
  if (root === "api") {
    if (OLLAMA_REFUSED.has(tail[0] ?? "")) return "refused";
    return OLLAMA_ROUTES.has(name) ? "ollama" : null;
  }
  return null;
}

/** The lease's own inference key, or an API token with `infer` (or admin); 401 otherwise. */
async function authorize(services: Services, lease: LeaseRow, header: string | undefined): Promise<string> {
  const token = bearerToken(header);
  const refuse = () =>
    new ApiError(
      "unauthorized",
      "this lease's inference key, or a token with the infer scope, is needed",
      {},
      {
        "WWW-Authenticate": 'Bearer realm="gpulease-llm"',
      },
    );
  if (!token) throw refuse();
  if (token.startsWith("glk_")) {
    if (lease.inference_key_hash && (await secretsEqual(await sha256Hex(token), lease.inference_key_hash)))
      return `key:${lease.inference_key_hash.slice(0, 32)}`;
    throw refuse();
  }
  const caller = await callerForToken(services, token);
  if (!caller || !hasScope(caller, "infer")) throw refuse();
  return `infer:${caller.tokenId ?? "admin"}`;
}

/** INFER_RATE_LIMIT_PER_MIN per key or token (0: unlimited), apart from the API's own limits. */
export async function limit(services: Services, key: string): Promise<void> {
  const perMin = services.config.inferRateLimitPerMin;
  if (perMin === 0) return;
  const admission = await services.rateLimits.admit(
    key,
    { rental: false, limits: { requestsPerMin: perMin, rentalsPerMin: perMin } },
    { log: services.log, outcome: "request let through" },
  );
  if (!admission.admitted) {
    throw new ApiError(
      "rate_limited",
      `limited to ${perMin} requests a minute; retry in ${admission.retryAfterS} s`,
      { retry_after: admission.retryAfterS },
      { "Retry-After": String(admission.retryAfterS) },
    );
  }
}

/**
 * Sends the request on with the caller's credentials dropped, and streams the answer back as it
 * comes (the body is never held); the caller going away aborts the machine's request. An OpenAI
 * stream is asked for its usage (`stream_options.include_usage`) so the tokens can be counted;
 * the usage chunk reaches only a client that asked for it.
 */
export async function forward(
  send: Fetcher["fetch"],
  request: Request,
  target: string,
  done: (sample: UsageSample) => void,
): Promise<Response> {
  const started = Date.now();
  const headers = forwardedHeaders(request.headers);
  let body: BodyInit | null = request.body;
  let filter: InjectedUsageFilter | null = null;
  if (request.method === "POST" && /\/v1\/(chat\/)?completions$/.test(target.split("?")[0] ?? "")) {
    const asked = withStreamUsage(await request.text());
    body = asked.body;
    if (asked.injected) filter = new InjectedUsageFilter();
    headers.delete("content-length");
  }
  let upstream: Response;
  try {
    upstream = await send(target, {
      method: request.method,
      headers,
      body,
      signal: request.signal,
      redirect: "manual",
    });
  } catch {
    done({ ok: false, prompt_tokens: 0, completion_tokens: 0, decode_tokens_per_s: null, first_token_ms: null });
    throw new ApiError("provider_error", "the lease's machine did not answer");
  }
  const type = upstream.headers.get("content-type") ?? "";
  const kind = type.includes("event-stream") ? "sse" : type.includes("ndjson") ? "ndjson" : "json";
  const reader = new UsageReader(kind);
  if (kind !== "sse") filter = null;
  let firstAt: number | null = null;
  let recorded = false;
  // Once per request, however the body ends: read to its end, the machine failing mid-stream, or
  // the caller hanging up (counted too; not an error of the machine's).
  const record = (ok: boolean) => {
    if (recorded) return;
    recorded = true;
    const counts = reader.end();
    done({
      ok,
      prompt_tokens: counts?.prompt_tokens ?? 0,
      completion_tokens: counts?.completion_tokens ?? 0,
      decode_tokens_per_s: counts?.decode_tokens_per_s ?? null,
      first_token_ms: firstAt === null ? null : firstAt - started,
    });
  };
  const out = new Headers(upstream.headers);
  out.delete("set-cookie");
  const init = { status: upstream.status, statusText: upstream.statusText, headers: out };
  if (!upstream.body) {
    record(upstream.ok);
    return new Response(null, init);
  }
  const source = upstream.body.getReader();
  let cancelled = false;
  const passed = new ReadableStream<Uint8Array>({
    async pull(controller) {
      // A piece the filter drops whole (the usage chunk) enqueues nothing: read on.
      for (;;) {
        let next: ReadableStreamReadResult<Uint8Array>;
        try {
          next = await source.read();
        } catch (error) {
          record(request.signal.aborted && upstream.ok);
          if (!cancelled) controller.error(error);
          return;
        }
        // The caller hung up while this read waited: the stream is closed already.
        if (cancelled) return;
        if (next.done) {
          record(upstream.ok);
          const tail = filter?.end();
          if (tail) controller.enqueue(tail);
          controller.close();
          return;
        }
        firstAt ??= Date.now();
        reader.push(next.value);
        const out = filter ? filter.push(next.value) : next.value;
        if (out) {
          controller.enqueue(out);
          return;
        }
      }
    },
    cancel(reason) {
      cancelled = true;
      record(upstream.ok);
      return source.cancel(reason);
    },
  });
  return new Response(passed, init);
}
