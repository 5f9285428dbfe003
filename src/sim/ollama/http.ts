import { displayName, type LibraryModel, manifestSize } from "./library";
import { type OllamaMachine, parseKeepAlive } from "./machine";
import { type Generation, generate, hashOf, tokenize } from "./text";

/**
 * The HTTP surface of a simulated Ollama server, in the shapes ollama/ollama answers with
 * (`docs/api.md`, `server/routes.go`, `api/types.go`, `openai/openai.go`, `middleware/openai.go`):
 * `/api/version`, `/api/tags`, `/api/ps`, `/api/pull`, `/api/show`, `/api/generate`, `/api/chat`,
 * `/api/embed`, `/api/embeddings`, `/v1/chat/completions`, `/v1/completions`, `/v1/embeddings`,
 * `/v1/models` and `/v1/models/{model}` (routes of `server/routes.go` GenerateRoutes).
 */

export interface ServeOptions {
  /** what `/api/version` says */
  version: string;
  /** real time between looks at the clock while a stream waits on it */
  tickMs: number;
  /** real time between two generated tokens of a stream */
  tokenMs: number;
  /** model-clock time between two progress lines of a pull (Ollama's ticker: 60 ms) */
  progressEveryMs: number;
  /** called after the server's state changed (the sim persists it) */
  changed?: () => void;
}

export const OLLAMA_VERSION = "0.32.15";

/** A model partly on the CPU generates this many times slower. */
const SPILL_SLOWDOWN = 5;
/** `keep_alive: -1` (forever) as /api/ps shows it: now + the largest Go duration */
const FOREVER_MS = 9_223_372_036_854;

type Body = Record<string, unknown>;

export async function serveOllama(machine: OllamaMachine, request: Request, options: ServeOptions): Promise<Response> {
  const path = new URL(request.url).pathname.replace(/\/+$/, "") || "/";
  const route = `${request.method === "HEAD" ? "GET" : request.method} ${path}`;
  try {
    await machine.prepare();
    switch (route) {
      case "GET /":
        return new Response("Ollama is running", { headers: { "Content-Type": "text/plain; charset=utf-8" } });
      case "GET /api/version":
        return json({ version: options.version });
      case "GET /api/tags":
        return json({ models: machine.pulledModels().map(({ model, at }) => tagsEntry(model, at)) });
      case "GET /api/ps":
        return json({ models: psModels(machine) });
      case "POST /api/pull":
        return await pull(machine, request, options);
      case "POST /api/generate":
        return await chatLike(machine, request, options, "generate");
      case "POST /api/chat":
        return await chatLike(machine, request, options, "chat");
      case "POST /v1/chat/completions":
        return await openaiChat(machine, request, options);
      case "GET /v1/models":
        return json(modelList(machine));
      case "POST /api/show":
        return await show(machine, request);
      case "POST /api/embed":
      case "POST /api/embeddings":
      case "POST /v1/embeddings":
        return await embed(machine, request, route);
      case "POST /v1/completions":
        return await openaiCompletion(machine, request);
      default:
        if (request.method !== "POST" && path.startsWith("/v1/models/"))
          return retrieveModel(machine, decodeURIComponent(path.slice("/v1/models/".length)));
        return new Response("404 page not found", { status: 404, headers: { "Content-Type": "text/plain" } });
    }
  } finally {
    options.changed?.();
  }
}

// ---- listings ----

function details(model: LibraryModel) {
  const { family, parameter_size, quantization_level } = model.profile;
  return { parent_model: "", format: "gguf", family, families: [family], parameter_size, quantization_level };
}

function tagsEntry(model: LibraryModel, at: number) {
  return {
    name: model.name,
    model: model.name,
    modified_at: iso(at),
    size: manifestSize(model),
    digest: model.digest,
    details: {
      ...details(model),
      context_length: model.profile.context_length,
      embedding_length: model.profile.embedding_length,
    },
    capabilities: ["completion", "tools"],
  };
}

function psModels(machine: OllamaMachine) {
  const now = machine.now();
  return machine
    .loadedModels()
    .map(({ model, loaded }) => ({
      name: model.name,
      model: model.name,
      size: loaded.size,
      digest: model.digest,
      details: details(model),
      expires_at: iso(loaded.expiresAt ?? now + FOREVER_MS),
      size_vram: loaded.sizeVram,
      context_length: loaded.contextLength,
    }))
    .sort((a, b) => b.expires_at.localeCompare(a.expires_at));
}

function modelList(machine: OllamaMachine) {
  const data = machine.pulledModels().map(({ model, at }) => ({
    id: model.name,
    object: "model",
    created: Math.floor(at / 1000),
    owned_by: model.name.includes("/") ? model.name.split("/").at(-2)! : "library",
  }));
  // ToListCompletion leaves a nil slice nil: an empty server answers `"data": null`.
  return { object: "list", data: data.length ? data : null };
}

// ---- show, retrieve, embed, completions ----

function pulledModel(machine: OllamaMachine, asked: string): { name: string; model: LibraryModel } | null {
  const name = displayName(asked);
  const model = name ? machine.model(name) : undefined;
  if (!name || !model || !machine.pulledModels().some((p) => p.model.name === name)) return null;
  return { name, model };
}

/** POST /api/show: ShowHandler's answer for a pulled model (404 `model '…' not found` else). */
async function show(machine: OllamaMachine, request: Request): Promise<Response> {
  const body = await readBody(request);
  if (!body.ok) return json({ error: body.error }, 400);
  const asked = str(body.value.model) ?? str(body.value.name) ?? "";
  const found = pulledModel(machine, asked);
  if (!found) return json({ error: `model '${asked}' not found` }, 404);
  const { model } = found;
  const at = machine.pulledModels().find((p) => p.model.name === found.name)?.at ?? machine.now();
  const arch = model.profile.family;
  return json({
    license: "",
    modelfile: `# Modelfile generated by "ollama show"\nFROM ${model.name}\n`,
    parameters: "",
    template: "{{ .Prompt }}",
    details: details(model),
    model_info: {
      "general.architecture": arch,
      [`${arch}.context_length`]: model.profile.context_length,
      [`${arch}.embedding_length`]: model.profile.embedding_length,
    },
    capabilities: ["completion", "tools"],
    modified_at: iso(at),
  });
}

/** GET /v1/models/{model}: RetrieveMiddleware's Model, or OpenAI's 404. */
function retrieveModel(machine: OllamaMachine, asked: string): Response {
  const found = pulledModel(machine, asked);
  if (!found) return openaiError(404, `model "${asked}" not found`);
  const at = machine.pulledModels().find((p) => p.model.name === found.name)?.at ?? machine.now();
  const owner = asked.includes("/") ? asked.split("/").at(-2)! : "library";
  return json({ id: asked, object: "model", created: Math.floor(at / 1000), owned_by: owner });
}

/** A deterministic unit vector of the model's embedding length for a text. */
function embeddingOf(model: LibraryModel, text: string): number[] {
  const n = Math.min(model.profile.embedding_length, 4096);
  const raw = Array.from({ length: n }, (_, i) => ((hashOf(`${text}:${i}`) % 2000) - 1000) / 1000);
  const norm = Math.sqrt(raw.reduce((sum, v) => sum + v * v, 0)) || 1;
  return raw.map((v) => Math.round((v / norm) * 1e6) / 1e6);
}

/** /api/embed (inputs), /api/embeddings (one prompt, the old route) and /v1/embeddings (OpenAI's list). */
async function embed(machine: OllamaMachine, request: Request, route: string): Promise<Response> {
  const openai = route === "POST /v1/embeddings";
  const fail = (status: number, message: string) =>
    openai ? openaiError(status, message) : json({ error: message }, status);
  const body = await readBody(request);
  if (!body.ok) return fail(400, body.error);
  const asked = str(body.value.model) ?? "";
  const found = pulledModel(machine, asked);
  if (!found) return fail(404, `model '${asked}' not found`);
  const legacy = route === "POST /api/embeddings";
  const input = legacy ? body.value.prompt : body.value.input;
  const texts =
    typeof input === "string"
      ? [input]
      : Array.isArray(input) && input.every((t) => typeof t === "string")
        ? (input as string[])
        : null;
  if (texts === null) return fail(400, "invalid input type");
  const used = machine.use(found.name, parseKeepAlive(body.value.keep_alive, machine.defaultKeepAliveMs()), null)!;
  const vectors = texts.map((t) => embeddingOf(found.model, t));
  const tokens = texts.reduce((sum, t) => sum + tokenize(t).length, 0);
  if (legacy) return json({ embedding: vectors[0] ?? [] });
  if (openai)
    return json({
      object: "list",
      data: vectors.map((embedding, index) => ({ object: "embedding", embedding, index })),
      model: asked,
      usage: { prompt_tokens: tokens, total_tokens: tokens },
    });
  const load = used.loadMs * 1e6;
  return json({
    model: asked,
    embeddings: vectors,
    total_duration: load + tokens * 200_000 + 1_000_000,
    load_duration: load,
    prompt_eval_count: tokens,
  });
}

/** POST /v1/completions: CompletionsMiddleware over GenerateHandler (not streamed here). */
async function openaiCompletion(machine: OllamaMachine, request: Request): Promise<Response> {
  const body = await readBody(request);
  if (!body.ok) return openaiError(400, body.error);
  const prompt = str(body.value.prompt);
  if (prompt === null) return openaiError(400, "prompt is required");
  const asked = str(body.value.model) ?? "";
  const found = pulledModel(machine, asked);
  if (!found) return openaiError(404, `model '${asked}' not found`);
  const used = machine.use(found.name, machine.defaultKeepAliveMs(), null)!;
  const messages = [{ role: "user", content: prompt }];
  const gen = generate(
    found.model,
    found.name,
    messages,
    num(body.value.max_tokens),
    used.loadMs,
    slowdown(machine, found.name),
  );
  return json({
    id: `cmpl-${Math.floor(Math.random() * 999)}`,
    object: "text_completion",
    created: Math.floor(machine.now() / 1000),
    model: asked,
    system_fingerprint: "fp_ollama",
    choices: [{ text: gen.tokens.join(""), index: 0, finish_reason: gen.done_reason }],
    usage: {
      prompt_tokens: gen.prompt_eval_count,
      completion_tokens: gen.eval_count,
      total_tokens: gen.prompt_eval_count + gen.eval_count,
    },
  });
}

// ---- pull ----

async function pull(machine: OllamaMachine, request: Request, options: ServeOptions): Promise<Response> {
  const body = await readBody(request);
  if (!body.ok) return json({ error: body.error }, 400);
  const reference = str(body.value.model) ?? str(body.value.name) ?? "";
  const name = displayName(reference);
  if (!name) return json({ error: "invalid model name" }, 400);
  await machine.prepare(name);
  // The pull waits on the download from now until it ends or its client hangs up, whichever is first.
  const attached = machine.attachPull(name);
  let released = false;
  const release = () => {
    if (released || !attached.ok) return;
    released = true;
    machine.detachPull(attached.name);
    options.changed?.();
  };
  const lines = pullLines(machine, attached, options, release, () => released);
  if (body.value.stream === false) {
    // waitForStream: the last progress, or the error as a 500.
    let last: Body = {};
    for await (const line of lines) last = line;
    return typeof last.error === "string" ? json({ error: last.error }, 500) : json(last);
  }
  return stream(
    (async function* () {
      for await (const line of lines) yield `${JSON.stringify(line)}\n`;
    })(),
    "application/x-ndjson",
    release,
  );
}

async function* pullLines(
  machine: OllamaMachine,
  attached: ReturnType<OllamaMachine["attachPull"]>,
  options: ServeOptions,
  release: () => void,
  hungUp: () => boolean,
): AsyncGenerator<Body> {
  try {
    yield { status: "pulling manifest" };
    if (!attached.ok) {
      yield { error: attached.error };
      return;
    }
    const model = machine.model(attached.name)!;
    const layerLine = (digest: string, total: number, completed: number): Body => ({
      status: `pulling ${digest.slice(7, 19)}`,
      digest,
      total,
      ...(completed > 0 ? { completed } : {}),
    });
    let emittedAt = Number.NEGATIVE_INFINITY;
    while (!hungUp()) {
      const state = machine.pullState(attached.name);
      if (state.phase === "failed") {
        yield { error: state.error };
        return;
      }
      if (state.phase === "pulled") {
        yield layerLine(model.model.digest, model.model.size, model.model.size);
        for (const small of model.small) yield layerLine(small.digest, small.size, small.size);
        yield { status: "verifying sha256 digest" };
        yield { status: "writing manifest" };
        yield { status: "success" };
        return;
      }
      const now = machine.now();
      if (now - emittedAt >= options.progressEveryMs) {
        emittedAt = now;
        yield layerLine(model.model.digest, state.total, state.completed);
      } else {
        await sleep(options.tickMs);
      }
    }
  } finally {
    release();
  }
}

// ---- generate and chat ----

interface Message {
  role: string;
  content: string;
}

async function chatLike(
  machine: OllamaMachine,
  request: Request,
  options: ServeOptions,
  kind: "generate" | "chat",
): Promise<Response> {
  const body = await readBody(request);
  if (!body.ok) return json({ error: body.error }, 400);
  const asked = str(body.value.model) ?? "";
  const name = displayName(asked);
  if (!name) return json({ error: "invalid model name" }, 400);
  const model = machine.model(name);
  if (!model || !machine.pulledModels().some((p) => p.model.name === name))
    return json({ error: `model '${asked}' not found` }, 404);

  const messages = kind === "chat" ? messagesOf(body.value.messages) : promptMessages(body.value);
  if (messages === null) return json({ error: "invalid messages" }, 400);
  const keepAliveMs = parseKeepAlive(body.value.keep_alive, machine.defaultKeepAliveMs());
  const opts = objectOf(body.value.options);
  const created_at = iso(machine.now());
  const empty = (done_reason: string): Body =>
    kind === "chat"
      ? { model: asked, created_at, message: { role: "assistant", content: "" }, done_reason, done: true }
      : { model: asked, created_at, response: "", done: true, done_reason };

  if (messages.length === 0) {
    if (keepAliveMs === 0) {
      machine.unload(name);
      return json(empty("unload"));
    }
    machine.use(name, keepAliveMs, num(opts.num_ctx));
    return json(empty("load"));
  }
  const used = machine.use(name, keepAliveMs, num(opts.num_ctx))!;
  const gen = generate(model, name, messages, num(opts.num_predict), used.loadMs, slowdown(machine, name));
  const metrics = metricsOf(gen);
  const context = kind === "generate" ? { context: contextOf(messages, gen) } : {};
  const piece = (text: string): Body =>
    kind === "chat"
      ? { model: asked, created_at: iso(machine.now()), message: { role: "assistant", content: text }, done: false }
      : { model: asked, created_at: iso(machine.now()), response: text, done: false };
  const final = (text: string): Body =>
    kind === "chat"
      ? {
          model: asked,
          created_at: iso(machine.now()),
          message: { role: "assistant", content: text },
          done_reason: gen.done_reason,
          done: true,
          ...metrics,
        }
      : {
          model: asked,
          created_at: iso(machine.now()),
          response: text,
          done: true,
          done_reason: gen.done_reason,
          ...context,
          ...metrics,
        };

  if (body.value.stream === false) return json(final(gen.tokens.join("")));
  return stream(
    (async function* () {
      for (const token of gen.tokens) {
        yield `${JSON.stringify(piece(token))}\n`;
        await sleep(options.tokenMs);
      }
      yield `${JSON.stringify(final(""))}\n`;
    })(),
    "application/x-ndjson",
  );
}

// ---- OpenAI-compatible chat ----

async function openaiChat(machine: OllamaMachine, request: Request, options: ServeOptions): Promise<Response> {
  const body = await readBody(request);
  if (!body.ok) return openaiError(400, body.error);
  const messages = messagesOf(body.value.messages);
  if (messages === null) return openaiError(400, "invalid message format");
  if (messages.length === 0) return openaiError(400, "[] is too short - 'messages'");
  const asked = str(body.value.model) ?? "";
  const name = displayName(asked);
  if (!name) return openaiError(400, "invalid model name");
  const model = machine.model(name);
  if (!model || !machine.pulledModels().some((p) => p.model.name === name))
    return openaiError(404, `model '${asked}' not found`);

  const used = machine.use(name, machine.defaultKeepAliveMs(), null)!;
  const maxTokens = num(body.value.max_tokens) ?? num(body.value.max_completion_tokens);
  const gen = generate(model, name, messages, maxTokens, used.loadMs, slowdown(machine, name));
  const id = `chatcmpl-${Math.floor(Math.random() * 999)}`;
  const created = Math.floor(machine.now() / 1000);
  const base = { id, created, model: asked, system_fingerprint: "fp_ollama" };
  const usage = {
    prompt_tokens: gen.prompt_eval_count,
    completion_tokens: gen.eval_count,
    total_tokens: gen.prompt_eval_count + gen.eval_count,
  };
  if (body.value.stream !== true) {
    return json({
      ...base,
      object: "chat.completion",
      choices: [
        {
          index: 0,
          message: { role: "assistant", content: gen.tokens.join("") },
          finish_reason: gen.done_reason,
        },
      ],
      usage,
    });
  }
  const includeUsage = objectOf(body.value.stream_options).include_usage === true;
  const chunk = (delta: Body, finish_reason: string | null) => ({
    ...base,
    object: "chat.completion.chunk",
    choices: [{ index: 0, delta, finish_reason }],
  });
  return stream(
    (async function* () {
      const tokens = gen.tokens.length ? gen.tokens : [""];
      for (const [i, token] of tokens.entries()) {
        yield sse(chunk(i === 0 ? { role: "assistant", content: token } : { content: token }, null));
        await sleep(options.tokenMs);
      }
      yield sse(chunk({}, gen.done_reason));
      if (includeUsage) yield sse({ ...base, object: "chat.completion.chunk", choices: [], usage });
      yield "data: [DONE]\n\n";
    })(),
    "text/event-stream",
  );
}

function openaiError(status: number, message: string): Response {
  const type = status === 400 ? "invalid_request_error" : status === 404 ? "not_found_error" : "api_error";
  return json({ error: { message, type, param: null, code: null } }, status);
}

// ---- helpers ----

function slowdown(machine: OllamaMachine, name: string): number {
  const entry = machine.loadedModels().find((l) => l.model.name === name);
  return entry && entry.loaded.sizeVram < entry.loaded.size ? SPILL_SLOWDOWN : 1;
}

function metricsOf(gen: Generation): Body {
  const metrics: Body = {
    total_duration: gen.total_duration,
    load_duration: gen.load_duration,
    prompt_eval_count: gen.prompt_eval_count,
    prompt_eval_duration: gen.prompt_eval_duration,
    eval_count: gen.eval_count,
    eval_duration: gen.eval_duration,
  };
  // Go's omitempty: zero counts and durations are left out.
  return Object.fromEntries(Object.entries(metrics).filter(([, v]) => v !== 0));
}

function contextOf(messages: Message[], gen: Generation): number[] {
  const text = messages.map((m) => m.content).join("\n") + gen.tokens.join("");
  const length = gen.prompt_eval_count + gen.eval_count;
  return Array.from({ length }, (_, i) => 128_000 + (hashOf(`${text}:${i}`) % 2_000));
}

function promptMessages(body: Body): Message[] | null {
  const prompt = body.prompt === undefined ? "" : str(body.prompt);
  if (prompt === null) return null;
  if (!prompt) return [];
  const system = str(body.system);
  return [...(system ? [{ role: "system", content: system }] : []), { role: "user", content: prompt }];
}

function messagesOf(value: unknown): Message[] | null {
  if (value === undefined || value === null) return [];
  if (!Array.isArray(value)) return null;
  const out: Message[] = [];
  for (const item of value) {
    const m = objectOf(item);
    const role = str(m.role);
    if (!role) return null;
    if (typeof m.content === "string") out.push({ role, content: m.content });
    else if (Array.isArray(m.content)) {
      // OpenAI content parts: the text parts count.
      const text = m.content
        .map((p) => objectOf(p))
        .filter((p) => p.type === "text" && typeof p.text === "string")
        .map((p) => p.text as string)
        .join("\n");
      out.push({ role, content: text });
    } else if (m.content === undefined || m.content === null) out.push({ role, content: "" });
    else return null;
  }
  return out;
}

async function readBody(request: Request): Promise<{ ok: true; value: Body } | { ok: false; error: string }> {
  const text = await request.text();
  if (!text.trim()) return { ok: false, error: "missing request body" };
  try {
    const value = JSON.parse(text) as unknown;
    if (typeof value !== "object" || value === null || Array.isArray(value))
      return { ok: false, error: "json: cannot unmarshal into Go value of type api.Request" };
    return { ok: true, value: value as Body };
  } catch {
    return { ok: false, error: "invalid character in request body: not JSON" };
  }
}

function objectOf(value: unknown): Body {
  return typeof value === "object" && value !== null && !Array.isArray(value) ? (value as Body) : {};
}

function str(value: unknown): string | null {
  return typeof value === "string" ? value : null;
}

function num(value: unknown): number | null {
  return typeof value === "number" && Number.isFinite(value) ? Math.trunc(value) : null;
}

function json(body: unknown, status = 200): Response {
  return new Response(JSON.stringify(body), {
    status,
    headers: { "Content-Type": "application/json; charset=utf-8" },
  });
}

function sse(body: unknown): string {
  return `data: ${JSON.stringify(body)}\n\n`;
}

/**
 * A streamed body from text pieces; a client that hangs up ends the generator (its `finally`
 * runs once the piece being made is done) and calls `hungUp` at once.
 */
function stream(pieces: AsyncGenerator<string>, contentType: string, hungUp?: () => void): Response {
  const encoder = new TextEncoder();
  const body = new ReadableStream<Uint8Array>({
    async pull(controller) {
      const next = await pieces.next();
      try {
        if (next.done) controller.close();
        else controller.enqueue(encoder.encode(next.value));
      } catch {
        // cancelled while the next piece was being made
      }
    },
    cancel() {
      hungUp?.();
      // Not awaited: the generator ends once the piece being made is done.
      pieces.return(undefined).catch(() => undefined);
    },
  });
  return new Response(body, { status: 200, headers: { "Content-Type": contentType } });
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

function iso(ms: number): string {
  return new Date(ms).toISOString();
}
