import fc from "fast-check";

/**
 * fast-check arbitraries for hostile HTTP requests. A request is generated as plain data
 * (`FuzzRequest`), so a failing one can be printed and replayed; toRequest() makes it a Request.
 */

/** One operation of the OpenAPI document (or an invented route). */
export interface Operation {
  method: string;
  /** OpenAPI template, e.g. /v1/leases/{id}/stop */
  path: string;
  pathParams: string[];
  queryParams: string[];
  hasBody: boolean;
}

export type Auth = "admin" | "none" | "read" | "garbage" | "basic" | "empty_bearer" | "huge";

export interface FuzzRequest {
  operation: Operation;
  method: string;
  /** the path after parameter substitution (already URL-ready) */
  path: string;
  query: [string, string][];
  body: string | null;
  contentType: string | null;
  auth: Auth;
  headers: [string, string][];
}

const HUGE = "x".repeat(100_000);

/** Strings that have broken parsers, routers and SQL before. */
export const nastyStrings = [
  "../",
  "../../etc/passwd",
  "..%2f..%2f",
  "%2e%2e",
  "%2e%2e%2f",
  "%252e%252e",
  "'; DROP TABLE leases;--",
  "' OR '1'='1",
  "1; SELECT * FROM tokens",
  "%00",
  "\u0000",
  "lse_\u0000",
  "lse_../../v1/tokens",
  "lse_01jb3k7q2m9x4v8n6c5t0w1yz%",
  "NaN",
  "-NaN",
  "Infinity",
  "-Infinity",
  "1e309",
  "-1",
  "0",
  "-0",
  "0x1F",
  "1_000",
  "٣",
  "9".repeat(400),
  "null",
  "undefined",
  "true",
  "[]",
  "{}",
  "__proto__",
  "constructor",
  " ",
  "",
  "%",
  "%zz",
  "\\",
  '"',
  "<script>alert(1)</script>",
  // biome-ignore lint/suspicious/noTemplateCurlyInString: a log4j-style probe, meant literally
  "${jndi:ldap://x/a}",
  "{{7*7}}",
  "😀🔥",
  "\u202eevil",
  "\ud800",
  "ﬀ",
  "a".repeat(5_000),
];

const text = fc.oneof(
  { weight: 4, arbitrary: fc.constantFrom(...nastyStrings) },
  { weight: 2, arbitrary: fc.string({ maxLength: 40 }) },
  { weight: 2, arbitrary: fc.string({ unit: "grapheme", maxLength: 40 }) },
  { weight: 1, arbitrary: fc.string({ unit: "binary", maxLength: 40 }) },
  { weight: 1, arbitrary: fc.string({ minLength: 1_000, maxLength: 5_000 }) },
);

/** Values a field should never accept, and some it should. */
export const weirdValue: fc.Arbitrary<unknown> = fc.oneof(
  text,
  fc.constantFrom(-1, 0, -0, 0.5, -1e308, 1e308, Number.MAX_SAFE_INTEGER + 2, -2147483649, 2147483648, 10081, 1e21),
  fc.double(),
  fc.integer(),
  fc.boolean(),
  fc.constant(null),
  fc.jsonValue({ maxDepth: 3 }),
  fc.constant([]),
  fc.constant({}),
  fc.constant(HUGE),
  fc.array(fc.integer(), { maxLength: 40 }),
  fc.dictionary(text, fc.jsonValue({ maxDepth: 1 }), { maxKeys: 4 }),
);

// Built once: constructing a stringMatching arbitrary costs about a millisecond in workerd, and
// building them per generated request was half of the fuzzer's run time.
const wellFormedId = fc.stringMatching(/^(lse|sch|tok)_[0-9a-z]{22}$/);
const simRef = fc.stringMatching(/^sim-[0-9a-f]{12}$/);

/** An id for a path parameter: a real one, a well-formed one, or something hostile. */
export function idValue(realIds: readonly string[]): fc.Arbitrary<string> {
  return fc.oneof(
    { weight: 3, arbitrary: fc.constantFrom(...realIds) },
    { weight: 1, arbitrary: wellFormedId },
    { weight: 1, arbitrary: simRef },
    { weight: 5, arbitrary: text },
  );
}

interface Mutation {
  action: "delete" | "set" | "add" | "nest";
  pick: number;
  value: unknown;
  extraKey: string;
}

const mutation: fc.Arbitrary<Mutation> = fc.record({
  action: fc.constantFrom("delete", "set", "set", "add", "nest"),
  pick: fc.nat(),
  value: weirdValue,
  extraKey: fc.oneof(
    fc.constantFrom("__proto__", "constructor", "prototype", "toString", "status", "provider_ref", "admin"),
    text,
  ),
});

/** Every object inside a JSON value (the value itself first), to pick a mutation target from. */
function objectsIn(value: unknown, out: Record<string, unknown>[] = []): Record<string, unknown>[] {
  if (value && typeof value === "object" && !Array.isArray(value)) {
    out.push(value as Record<string, unknown>);
    for (const child of Object.values(value)) objectsIn(child, out);
  }
  return out;
}

function defineOwn(target: Record<string, unknown>, key: string, value: unknown): void {
  Object.defineProperty(target, key, { value, enumerable: true, writable: true, configurable: true });
}

function applyMutations(seed: unknown, mutations: Mutation[]): unknown {
  const body = structuredClone(seed);
  for (const m of mutations) {
    const targets = objectsIn(body);
    const target = targets[m.pick % Math.max(1, targets.length)];
    if (!target) continue;
    const keys = Object.keys(target);
    const key = keys.length ? keys[m.pick % keys.length]! : m.extraKey;
    // Own properties only: on an empty object `key` may be "__proto__" or "constructor", and a
    // plain assignment would set the prototype or wrap Object itself (a circular body).
    const own = Object.hasOwn(target, key) ? target[key] : undefined;
    switch (m.action) {
      case "delete":
        delete target[key];
        break;
      // A copy: fc.constant({}) hands out one shared object, which later mutations would write into.
      case "set":
        defineOwn(target, key, structuredClone(m.value));
        break;
      case "add":
        defineOwn(target, m.extraKey, structuredClone(m.value));
        break;
      case "nest":
        defineOwn(target, key, { [key]: own });
        break;
    }
  }
  return body;
}

/** A body close to a valid one for the route, with a few fields broken, dropped or added. */
export function nearValidBody(seeds: readonly unknown[]): fc.Arbitrary<string> {
  return fc
    .tuple(fc.constantFrom(...seeds), fc.array(mutation, { maxLength: 3 }))
    .map(([seed, mutations]) => JSON.stringify(applyMutations(seed, mutations)));
}

const deeplyNested = fc
  .tuple(fc.integer({ min: 50, max: 10_000 }), fc.boolean())
  .map(([depth, arrays]) =>
    arrays ? `${"[".repeat(depth)}${"]".repeat(depth)}` : `${'{"a":'.repeat(depth)}1${"}".repeat(depth)}`,
  );

const notJson = fc.oneof(
  fc.constantFrom(
    "{",
    '{"max_minutes":',
    "}",
    "[1,2",
    "NaN",
    "undefined",
    "{'a': 1}",
    "max_minutes=5",
    "\u0000",
    "\ufeff{}",
    "<xml/>",
    '--x\r\nContent-Disposition: form-data; name="a"\r\n\r\n1\r\n--x--',
  ),
  fc.string({ maxLength: 200 }),
  fc.string({ unit: "binary", maxLength: 200 }),
);

/** Any body: near-valid, random JSON, hostile JSON, or not JSON at all. */
export function bodyFor(seeds: readonly unknown[]): fc.Arbitrary<string | null> {
  return fc.oneof(
    { weight: 6, arbitrary: nearValidBody(seeds) },
    { weight: 2, arbitrary: fc.json({ maxDepth: 4 }) },
    { weight: 1, arbitrary: deeplyNested },
    { weight: 2, arbitrary: notJson },
    { weight: 1, arbitrary: fc.constant(JSON.stringify({ name: HUGE, max_minutes: 5 })) },
    { weight: 1, arbitrary: fc.constant(null) },
  );
}

export const contentType: fc.Arbitrary<string | null> = fc.oneof(
  { weight: 6, arbitrary: fc.constant("application/json") },
  {
    weight: 3,
    arbitrary: fc.constantFrom(
      "application/json; charset=utf-8",
      "APPLICATION/JSON",
      "application/json; charset=utf-16",
      "text/plain",
      "application/x-www-form-urlencoded",
      "multipart/form-data; boundary=x",
      "application/xml",
      "application/json, text/plain",
      "",
      "*/*",
      "application/vnd.api+json",
    ),
  },
  { weight: 1, arbitrary: fc.constant(null) },
);

const queryKey = (declared: string[]) =>
  fc.oneof(
    { weight: 3, arbitrary: declared.length ? fc.constantFrom(...declared) : fc.constant("limit") },
    {
      weight: 1,
      arbitrary: fc.constantFrom(
        "limit",
        "status",
        "cursor",
        "after",
        "provider",
        "vram_gb",
        "__proto__",
        "a[b]",
        "limit[]",
        "",
        "LIMIT",
      ),
    },
    { weight: 1, arbitrary: text },
  );

const queryValue = fc.oneof(
  {
    weight: 3,
    arbitrary: fc.constantFrom(
      "1",
      "50",
      "200",
      "201",
      "0",
      "-1",
      "1.5",
      " 5",
      "5 ",
      "1e3",
      "0x10",
      "NaN",
      "active",
      "stopped",
      "runpod,vast",
      "sim,,",
      "4090",
      "true",
    ),
  },
  { weight: 2, arbitrary: text },
);

/** A query string: declared and invented parameters, repeated, odd and hostile values. */
export function queryFor(operation: Operation): fc.Arbitrary<[string, string][]> {
  return fc.array(fc.tuple(queryKey(operation.queryParams), queryValue), { maxLength: 6 });
}

export const auth: fc.Arbitrary<Auth> = fc.oneof(
  { weight: 14, arbitrary: fc.constant<Auth>("admin") },
  { weight: 6, arbitrary: fc.constantFrom<Auth>("none", "read", "garbage", "basic", "empty_bearer", "huge") },
);

const extraHeaders = fc.array(
  fc.oneof(
    fc.tuple(fc.constant("Idempotency-Key"), fc.oneof(fc.constantFrom("fuzz-key", "", " ", "a".repeat(201)), text)),
    fc.tuple(fc.constant("Accept"), fc.constantFrom("text/event-stream", "application/json", "*/*", "text/html")),
    fc.tuple(fc.constant("Last-Event-ID"), queryValue),
    fc.tuple(fc.constant("X-Forwarded-For"), text),
  ),
  { maxLength: 3 },
);

const otherMethods = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"];

/** encodeURIComponent, with lone surrogates (which it refuses) replaced first. */
function encodePathSegment(value: string): string {
  return encodeURIComponent(
    value.replace(/[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g, "\ufffd"),
  );
}

/** Fills the path template: mostly encoded, sometimes raw (so '/', '?', '#' and '%' reach the router). */
function pathArb(operation: Operation, realIds: readonly string[]): fc.Arbitrary<string> {
  if (operation.pathParams.length === 0) return fc.constant(operation.path);
  return fc
    .array(fc.tuple(idValue(realIds), fc.boolean()), {
      minLength: operation.pathParams.length,
      maxLength: operation.pathParams.length,
    })
    .map((values) => {
      let path = operation.path;
      operation.pathParams.forEach((name, i) => {
        const [value, raw] = values[i]!;
        path = path.replace(`{${name}}`, raw ? value : encodePathSegment(value));
      });
      return path;
    });
}

/** One hostile request for one operation. */
export function requestFor(
  operation: Operation,
  seeds: readonly unknown[],
  realIds: readonly string[],
): fc.Arbitrary<FuzzRequest> {
  return fc.record({
    operation: fc.constant(operation),
    method: fc.oneof(
      { weight: 8, arbitrary: fc.constant(operation.method) },
      { weight: 1, arbitrary: fc.constantFrom(...otherMethods) },
    ),
    path: pathArb(operation, realIds),
    query: queryFor(operation),
    body: operation.hasBody
      ? bodyFor(seeds.length ? seeds : [{}])
      : fc.oneof({ weight: 4, arbitrary: fc.constant(null) }, { weight: 1, arbitrary: bodyFor([{}]) }),
    contentType,
    auth,
    headers: extraHeaders,
  });
}

/** The Request for a generated one; null when the platform refuses to build it (never sent). */
export function toRequest(request: FuzzRequest, tokens: { admin: string; read: string }): Request | null {
  const headers = new Headers();
  switch (request.auth) {
    case "admin":
      headers.set("Authorization", `Bearer ${tokens.admin}`);
      break;
    case "read":
      headers.set("Authorization", `Bearer ${tokens.read}`);
      break;
    case "garbage":
      headers.set("Authorization", "Bearer gl_notarealtoken_0000000000000000000000000000");
      break;
    case "basic":
      headers.set("Authorization", `Basic ${btoa("admin:admin")}`);
      break;
    case "empty_bearer":
      headers.set("Authorization", "Bearer ");
      break;
    case "huge":
      headers.set("Authorization", `Bearer ${"A".repeat(16_000)}`);
      break;
    case "none":
      break;
  }
  for (const [name, value] of request.headers) {
    // Non-ASCII header values reach the worker as UTF-8 bytes, with a runtime warning per request;
    // their ASCII remainder exercises the same parsing.
    headers.append(name, value.replace(/[^\x20-\x7e]/g, ""));
  }
  if (request.contentType !== null) headers.set("Content-Type", request.contentType);
  const search = new URLSearchParams(request.query).toString();
  const method = request.method;
  const body = method === "GET" || method === "HEAD" ? null : request.body;
  try {
    return new Request(`http://gpulease.test${request.path}${search ? `?${search}` : ""}`, { method, headers, body });
  } catch {
    return null;
  }
}

/** A short, printable description of a request, for failure reports (non-ASCII escaped as \uXXXX). */
export function describeRequest(request: FuzzRequest): string {
  const search = new URLSearchParams(request.query).toString();
  const body =
    request.body === null
      ? "(none)"
      : request.body.length > 300
        ? `${request.body.slice(0, 300)}… (${request.body.length} chars)`
        : request.body;
  return printable(
    `${request.method} ${request.path.slice(0, 200)}${search ? `?${search.slice(0, 200)}` : ""} auth=${request.auth} content-type=${request.contentType ?? "(none)"} body=${body}`,
  );
}

/** Escapes everything outside printable ASCII: lone surrogates would break the test runner's log channel. */
export function printable(text: string): string {
  return text.replace(/[^\x20-\x7e]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
}
