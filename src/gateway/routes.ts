import { type Context, Hono } from "hono";
import { callerForToken, hasScope } from "../auth/middleware";
import { ApiError } from "../errors";
import { bearerToken, sha256Hex } from "../lib/crypto";
import type { AppEnv, Services } from "../services";
import { type AdmissionFacts, admitCaller, type Credential } from "./admission";
import { inDialect } from "./error-shape";
import { forwardedHeaders } from "./forward-headers";
import { machineSender } from "./machine-fetch";
import { checkedRequest } from "./request-checks";
import { InjectedUsageFilter, withStreamUsage } from "./stream-usage";
import { UsageReader, type UsageSample } from "./usage";
import { holdUsage, takeHeld } from "./usage-hold";

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
  if (!/^lse_[0-9a-z]{22}$/.test(leaseId)) throw new ApiError("not_found", "no such model lease");
  // One call to the lease's keeper, no D1 read: whether the caller may in and where the machine
  // is, carrying the usage of this isolate's earlier requests to the lease (usage-hold.ts).
  const facts = await services.keepers.admission(leaseId, takeHeld(leaseId));
  const { credential, limitKey } = await credentialOf(services, facts, c.req.header("Authorization"));
  const admission = await admitCaller(facts, credential);
  if (!admission.ok && admission.code !== "lease_not_running") throw refusal(admission.code, admission.message);
  const route = routeOf(rest);
  if (route === "refused")
    throw new ApiError("forbidden", "this Ollama route changes the server's models: not through the gateway");
  if (route === null) throw new ApiError("not_found", `no gateway route /${rest}`);
  await limit(services, limitKey);
  if (!admission.ok) throw refusal(admission.code, admission.message);
  const send = machineSender(services, admission.provider);
  const target = `${admission.url}/${rest}${new URL(c.req.url).search}`;
  const request = await checkedRequest(c.req.raw, rest, facts?.contextLength ?? null);
  return forward(send, request, target, (sample) =>
    holdUsage(leaseId, sample, services.config.gatewayUsageHoldMs, c.executionCtx, (samples) =>
      services.keepers.admission(leaseId, samples),
    ),
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

/**
 * The caller's credential: an inference key (its hash, compared with the lease's by admitCaller),
 * or an API token checked here (it needs the infer scope; a scoped token is one D1 read). A token
 * is looked up only for a model lease that exists: an unknown lease answers 404 to anyone. Also
 * what INFER_RATE_LIMIT_PER_MIN counts by: the key, or the token.
 */
async function credentialOf(
  services: Services,
  facts: AdmissionFacts | null,
  header: string | undefined,
): Promise<{ credential: Credential; limitKey: string }> {
  const token = bearerToken(header);
  if (!token) return { credential: { kind: "none" }, limitKey: "" };
  if (token.startsWith("glk_")) {
    const hash = await sha256Hex(token);
    return { credential: { kind: "key", hash }, limitKey: `key:${hash.slice(0, 32)}` };
  }
  if (!facts?.model) return { credential: { kind: "none" }, limitKey: "" };
  const caller = await callerForToken(services, token);
  return {
    credential: { kind: "token", allowed: caller !== null && hasScope(caller, "infer") },
    limitKey: `infer:${caller?.tokenId ?? "admin"}`,
  };
}

/** The gateway's refusals in the error envelope; a 401 names the realm. */
function refusal(code: "not_found" | "unauthorized" | "lease_not_running", message: string): ApiError {
  if (code !== "unauthorized") return new ApiError(code, message);
  return new ApiError(code, message, {}, { "WWW-Authenticate": 'Bearer realm="gpulease-llm"' });
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
  const streamFilter = filter;
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
      // An overlong SSE event is an overlong line to the reader too: counted once.
      unparsed: Math.max(reader.overlong, streamFilter?.overlong ?? 0),
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
  // A length counts the bytes as sent; an encoded body arrives decoded, longer: no length then.
  const expectedLength = upstream.headers.has("content-encoding")
    ? Number.NaN
    : Number(upstream.headers.get("content-length") ?? Number.NaN);
  let received = 0;
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
        // Filtered before the sample is taken: an overlong event in this chunk is in its count.
        const out = filter ? filter.push(next.value) : next.value;
        received += next.value.byteLength;
        // Complete (its whole length, or the stream's last word): counted before the last bytes
        // go out, so the caller's next request finds this one's usage held for its keeper call.
        if (received === expectedLength || reader.finished) record(upstream.ok);
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
