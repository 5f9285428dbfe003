import { type Context, Hono } from "hono";
import { callerForToken, hasScope } from "../auth/middleware";
import { ApiError, type ErrorCode, statusByCode } from "../errors";
import { machineSender } from "../gateway/machine-fetch";
import { refusalOf as bodyRefusalOf } from "../gateway/request-checks";
import { forward, limit, routeOf } from "../gateway/routes";
import { holdUsage } from "../gateway/usage-hold";
import { bearerToken, sha256Hex } from "../lib/crypto";
import type { AppEnv, Services } from "../services";
import type { Acquired, EndpointCredential, EndpointDO } from "./endpoint-do";
import { holdRelease, takeReleases } from "./release-hold";
import { endpointObject } from "./routes";
import { ENDPOINT_NAME } from "./schema";
import { type EndpointRow, getEndpointByKeyHash, getEndpointByName, listEndpoints } from "./store";

/** A request body the gateway reads to find its `model` (the machine's own limit is far above). */
const MAX_BODY_BYTES = 4 * 1024 * 1024;

/** Who may call: one endpoint's key, or an API token with `infer` (or admin) that opens every endpoint. */
type KeyHolder = { kind: "endpoint"; endpoint: EndpointRow; rateKey: string } | { kind: "token"; rateKey: string };

/** An error of the endpoint gateway: its HTTP status, OpenAI's `code`, and headers (Retry-After). */
class EndpointError extends Error {
  constructor(
    readonly status: 400 | 401 | 402 | 403 | 404 | 409 | 413 | 429 | 502 | 503,
    readonly code: string,
    message: string,
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
  }
}

const typeByStatus: Record<number, string> = {
  400: "invalid_request_error",
  401: "authentication_error",
  402: "insufficient_quota",
  403: "permission_error",
  404: "invalid_request_error",
  409: "invalid_request_error",
  413: "invalid_request_error",
  429: "rate_limit_error",
};

/** `{"error": {"message", "type", "code"}}`, as OpenAI's clients read an error. */
function openAiError(c: Context<AppEnv>, error: unknown): Response {
  const known =
    error instanceof EndpointError
      ? error
      : error instanceof ApiError
        ? new EndpointError(error.status as EndpointError["status"], error.code, error.message, error.headers)
        : null;
  if (!known) throw error;
  const type = typeByStatus[known.status] ?? "server_error";
  const headers = { ...known.headers, "X-Request-Id": c.get("requestId") };
  return c.json({ error: { message: known.message, type, code: known.code, param: null } }, known.status, headers);
}

/**
 * The endpoints' side of the LLM gateway: `/llm/v1/…` picks the endpoint by the OpenAI `model`
 * field, `/llm/e/{name}/…` names it; each request goes to a replica the endpoint's object picks
 * (one Durable Object call), through the lease gateway's own forwarding and metering.
 */
export const endpointGatewayRoutes = new Hono<AppEnv>()
  .all("/llm/v1/*", async (c) => {
    try {
      return await serve(c, null, c.req.path.slice("/llm/".length));
    } catch (error) {
      return openAiError(c, error);
    }
  })
  .all("/llm/e/:name/*", async (c) => {
    const name = c.req.param("name");
    const rest = c.req.path.slice(`/llm/e/${name}/`.length);
    try {
      return await serve(c, name, rest);
    } catch (error) {
      if (rest.startsWith("v1/")) return openAiError(c, error);
      if (error instanceof EndpointError) throw new ApiError(apiCodeOf(error), error.message, {}, error.headers);
      throw error;
    }
  });

async function serve(c: Context<AppEnv>, named: string | null, restPath: string): Promise<Response> {
  const services = c.get("services");
  const rest = restPath.replace(/\/+$/, "");
  const caller = await credentialOf(services, c.req.header("Authorization"));
  const route = routeOf(rest);
  if (route === "refused" || route === null) {
    await authorize(services, c.req.header("Authorization"));
    if (route === "refused")
      throw new EndpointError(
        403,
        "forbidden",
        "this Ollama route changes the server's models: not through the gateway",
      );
    throw new EndpointError(404, "not_found", `no gateway route /${rest}`);
  }
  if (rest === "v1/models") {
    const holder = await authorize(services, c.req.header("Authorization"));
    await limit(services, holder.rateKey);
    return c.json(await modelList(services, holder, named), 200);
  }
  // A wrong key is counted under its own hash: the limit is asked before the endpoint's object
  // (the one call that knows the key), so a limited caller never starts a replica.
  await limit(services, caller.rateKey);

  const request = c.req.raw;
  let text: string | null = null;
  let body: Record<string, unknown> | null = null;
  if (request.method === "POST") {
    const declared = Number(request.headers.get("content-length") ?? "0");
    if (declared > MAX_BODY_BYTES) throw new EndpointError(413, "request_too_large", "the request body is too large");
    text = await request.text();
    if (text.length > MAX_BODY_BYTES)
      throw new EndpointError(413, "request_too_large", "the request body is too large");
    try {
      const parsed: unknown = JSON.parse(text);
      body =
        parsed && typeof parsed === "object" && !Array.isArray(parsed) ? (parsed as Record<string, unknown>) : null;
    } catch {
      body = null;
    }
  }
  const name = named ?? (typeof body?.model === "string" ? body.model : null);
  if (!name) {
    await authorize(services, c.req.header("Authorization"));
    throw new EndpointError(400, "model_required", "name the endpoint in the `model` field");
  }
  const origin = new URL(c.req.url).origin;
  const acquired = await acquireByName(services, c.executionCtx, caller.credential, name, origin);
  if (acquired.kind !== "routed") throw refusalOf(name, acquired);
  const { stub } = acquired;
  const release = (ok: boolean) =>
    holdRelease(
      acquired.endpointId,
      { ticket: acquired.ticket, ok },
      services.config.gatewayUsageHoldMs,
      c.executionCtx,
      (releases) => stub.release(releases),
    );
  // What the lease gateway refuses a caller (a context above the replica's sizing, a keep_alive
  // that unloads the model) is refused here too (src/gateway/request-checks.ts).
  const refusal = bodyRefusalOf(rest, body, acquired.contextLength);
  if (refusal) {
    release(true);
    throw new EndpointError(400, "invalid_request", refusal);
  }
  // The machine knows the model by its own name, not the endpoint's.
  if (body && "model" in body) text = JSON.stringify({ ...body, model: acquired.model });
  const send = machineSender(services, acquired.provider);
  const target = `${acquired.base.replace(/\/+$/, "")}/${rest}${new URL(c.req.url).search}`;
  const sent = new Request(request.url, {
    method: request.method,
    headers: request.headers,
    body: text,
    signal: request.signal,
  });
  return forward(send, sent, target, (sample) => {
    // The replica's usage rides on the lease gateway's hold (one keeper call for many requests).
    holdUsage(acquired.leaseId, sample, services.config.gatewayUsageHoldMs, c.executionCtx, (samples) =>
      services.keepers.admission(acquired.leaseId, samples),
    );
    release(sample.ok);
  });
}

/**
 * The caller's credential without a D1 read: an endpoint key's hash (the endpoint's object
 * compares it), or an API token with the infer scope (a scoped token is one D1 read, as on the
 * lease gateway); 401 for anything else.
 */
async function credentialOf(
  services: Services,
  header: string | undefined,
): Promise<{ credential: EndpointCredential; rateKey: string }> {
  const token = bearerToken(header);
  if (token?.startsWith("gle_")) {
    const hash = await sha256Hex(token);
    return { credential: { kind: "key", hash }, rateKey: `endpoint:${hash.slice(0, 32)}` };
  }
  const caller = token ? await callerForToken(services, token) : null;
  if (!caller || !hasScope(caller, "infer")) throw unauthorized();
  return { credential: { kind: "token" }, rateKey: `infer:${caller.tokenId ?? "admin"}` };
}

/**
 * The endpoint's object asked for a replica: its id from this isolate's name → id map (D1 only
 * for a name not seen yet, or one whose object says it is gone: deleted, or a new endpoint took
 * the name). A key the object refuses is looked up once more to tell 401 from 404.
 */
async function acquireByName(
  services: Services,
  ctx: { waitUntil(promise: Promise<unknown>): void },
  credential: EndpointCredential,
  name: string,
  origin: string,
): Promise<Answered & { stub: DurableObjectStub<EndpointDO>; endpointId: string }> {
  const missing = () =>
    new EndpointError(404, "model_not_found", `no endpoint ${JSON.stringify(name.slice(0, 64))} for this key`);
  for (let attempt = 0; attempt < 2; attempt++) {
    let id = attempt === 0 ? endpointIds.get(name) : undefined;
    if (id === undefined) {
      const row = ENDPOINT_NAME.test(name) ? await getEndpointByName(services.db, name) : null;
      if (!row) break;
      id = row.id;
      rememberEndpointId(name, id);
    }
    const stub = endpointObject(services.env, id);
    // Ended requests ride on this call; if it fails they are sent on their own (a lost one would
    // hold its replica's count up until its ticket expires).
    const releases = takeReleases(id);
    const acquired = await stub.acquire({ endpointId: id, credential, origin, releases }).catch((error: unknown) => {
      if (releases.length > 0) ctx.waitUntil(stub.release(releases).catch(() => undefined));
      throw error;
    });
    if (acquired.kind === "gone") {
      endpointIds.delete(name);
      continue;
    }
    if (acquired.kind === "unauthorized") {
      if (credential.kind === "key" && (await getEndpointByKeyHash(services.db, credential.hash))) throw missing();
      throw unauthorized();
    }
    return { ...acquired, stub, endpointId: id };
  }
  if (credential.kind === "key" && !(await getEndpointByKeyHash(services.db, credential.hash))) throw unauthorized();
  throw missing();
}

/** What the endpoint's object answered a caller it let in. */
type Answered = Exclude<Acquired, { kind: "unauthorized" | "gone" }>;

/** Endpoint ids by name, in this isolate: a hint only (the endpoint's object answers `gone` for a stale one). */
const endpointIds = new Map<string, string>();
const MAX_REMEMBERED_IDS = 1000;

function rememberEndpointId(name: string, id: string): void {
  if (endpointIds.size >= MAX_REMEMBERED_IDS) endpointIds.clear();
  endpointIds.set(name, id);
}

function unauthorized(): EndpointError {
  return new EndpointError(
    401,
    "unauthorized",
    "an endpoint's key (gle_…), or a token with the infer scope, is needed",
    { "WWW-Authenticate": 'Bearer realm="gpulease-llm"' },
  );
}

/** The endpoint's key, or an API token with the infer scope; 401 otherwise (the D1 path: lists and errors). */
async function authorize(services: Services, header: string | undefined): Promise<KeyHolder> {
  const token = bearerToken(header);
  if (!token) throw unauthorized();
  if (token.startsWith("gle_")) {
    const hash = await sha256Hex(token);
    const endpoint = await getEndpointByKeyHash(services.db, hash);
    if (!endpoint) throw unauthorized();
    return { kind: "endpoint", endpoint, rateKey: `endpoint:${hash.slice(0, 32)}` };
  }
  const caller = await callerForToken(services, token);
  if (!caller || !hasScope(caller, "infer")) throw unauthorized();
  return { kind: "token", rateKey: `infer:${caller.tokenId ?? "admin"}` };
}

/** The named endpoint if the holder may use it: an endpoint's key opens only its own. */
async function endpointFor(services: Services, holder: KeyHolder, name: string): Promise<EndpointRow> {
  const missing = () =>
    new EndpointError(404, "model_not_found", `no endpoint ${JSON.stringify(name.slice(0, 64))} for this key`);
  if (holder.kind === "endpoint") {
    if (holder.endpoint.name !== name) throw missing();
    return holder.endpoint;
  }
  const row = ENDPOINT_NAME.test(name) ? await getEndpointByName(services.db, name) : null;
  if (!row) throw missing();
  return row;
}

/** GET …/v1/models: the endpoints the key may use (OpenAI's list), each with its state. */
async function modelList(services: Services, holder: KeyHolder, named: string | null) {
  let rows: EndpointRow[];
  if (named !== null) rows = [await endpointFor(services, holder, named)];
  else rows = holder.kind === "endpoint" ? [holder.endpoint] : await listEndpoints(services.db);
  const data = await Promise.all(
    rows.map(async (row) => {
      const live = await endpointObject(services.env, row.id).live(row);
      return {
        id: row.name,
        object: "model" as const,
        created: Math.floor(Date.parse(row.created_at) / 1000),
        owned_by: "gpulease",
        model: row.model,
        state: live.state,
        replicas: live.replicas.filter((r) => r.status === "running").length,
      };
    }),
  );
  return { object: "list" as const, data };
}

function refusalOf(name: string, acquired: Exclude<Answered, { kind: "routed" }>): EndpointError {
  switch (acquired.kind) {
    case "starting":
      return new EndpointError(
        503,
        "endpoint_starting",
        `endpoint ${name}: a replica is starting, expected by ${acquired.expectedAt}; retry in ${acquired.retryAfterS} s`,
        { "Retry-After": String(acquired.retryAfterS) },
      );
    case "breaker_open":
      return new EndpointError(
        503,
        "endpoint_unavailable",
        `endpoint ${name} is not renting: ${acquired.detail}; it tries again in ${acquired.retryAfterS} s or when changed (PATCH)`,
        { "Retry-After": String(acquired.retryAfterS) },
      );
    case "budget_exhausted":
      return new EndpointError(402, "budget_exceeded", acquired.detail);
  }
}

/** The API envelope's code for an endpoint error on the Ollama routes (`/llm/e/{name}/api/…`). */
function apiCodeOf(error: EndpointError): ErrorCode {
  if (error.code in statusByCode) return error.code as ErrorCode;
  const byStatus: Partial<Record<number, ErrorCode>> = {
    400: "invalid_request",
    401: "unauthorized",
    402: "budget_exceeded",
    403: "forbidden",
    404: "not_found",
    413: "invalid_request",
    429: "rate_limited",
  };
  return byStatus[error.status] ?? "provider_error";
}
