// An Ollama server stand-in on loopback for the gateway bench: answers /api/version, /api/tags,
// /api/ps, POST /api/generate (NDJSON, or JSON with stream:false) and POST /v1/chat/completions
// (JSON, or SSE with a `usage` chunk when stream_options.include_usage) after a fixed delay, then
// streams one chunk every `chunkMs`. Any path prefix is accepted (`/pod/{id}-{port}/api/tags`), so
// it can stand behind a RunPod proxy template. Counts open responses, for "streams held".
import { createServer } from "node:http";
import { freePort } from "../../scripts/lib/local-worker.mjs";

const DIGEST = "sha256:74701a8c35f6c8d9a4b91f3f3497643001d63e0c7a84e085bed452548fa88d45";
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const MIB = 2 ** 20;

/**
 * What `/api/ps` shows on the GPU, by the runner's physics (src/models/runner.ts): the whole
 * loaded `size` while the card keeps llama.cpp's 1 GiB margin beyond the 457 MiB CUDA reserve,
 * else what is left (the rest on the CPU). `gpuMib` null: a card large enough.
 */
function sizeOnGpu(size, gpuMib) {
  if (gpuMib === null) return size;
  const room = gpuMib * MIB - 457 * MIB - 1024 * MIB;
  return size <= room ? size : Math.max(0, room);
}

/** `model`'s name as listed; `delayMs` before the first byte; `chunks` tokens `chunkMs` apart; `gpuMib` the card's memory as the driver reports it. */
export async function startFakeOllama({
  model,
  size = 1_321_098_329,
  delayMs = 10,
  chunkMs = 2,
  chunks = 8,
  gpuMib = null,
} = {}) {
  const port = await freePort();
  const state = { delayMs, chunkMs, chunks, open: 0, peakOpen: 0, requests: 0, byPath: {} };
  const server = createServer(async (req, res) => {
    state.requests += 1;
    state.open += 1;
    state.peakOpen = Math.max(state.peakOpen, state.open);
    let closed = false;
    res.once("close", () => {
      closed = true;
      state.open -= 1;
    });
    const route = /(\/api\/[a-z]+|\/v1\/[a-z/]+)$/.exec((req.url ?? "/").split("?")[0])?.[1] ?? req.url;
    state.byPath[route] = (state.byPath[route] ?? 0) + 1;
    let raw = "";
    for await (const chunk of req) raw += chunk;
    let body = {};
    try {
      body = raw ? JSON.parse(raw) : {};
    } catch {
      res.writeHead(400, { "content-type": "application/json" }).end('{"error":"invalid JSON"}');
      return;
    }
    const json = (status, value) => {
      res.writeHead(status, { "content-type": "application/json; charset=utf-8" }).end(JSON.stringify(value));
    };
    if (req.method === "GET" && route === "/api/version") return json(200, { version: "0.12.6" });
    const listed = { name: model, model, digest: DIGEST.slice(7), size, modified_at: new Date().toISOString() };
    if (req.method === "GET" && route === "/api/tags") return json(200, { models: [listed] });
    if (req.method === "GET" && route === "/api/ps")
      return json(200, { models: [{ ...listed, size_vram: sizeOnGpu(size, gpuMib) }] });
    const count = Math.max(1, Math.min(4096, Number(body.max_tokens ?? body.options?.num_predict ?? state.chunks)));
    const promptTokens = Math.max(1, Math.ceil(JSON.stringify(body.messages ?? body.prompt ?? "").length / 4));
    await sleep(state.delayMs);
    if (closed) return;
    const created = Math.floor(Date.now() / 1000);
    if (req.method === "POST" && route === "/v1/chat/completions") {
      const id = `chatcmpl-${state.requests}`;
      const usage = { prompt_tokens: promptTokens, completion_tokens: count, total_tokens: promptTokens + count };
      if (body.stream !== true) {
        await sleep(state.chunkMs * (count - 1));
        return json(200, {
          id,
          object: "chat.completion",
          created,
          model,
          system_fingerprint: "fp_ollama",
          choices: [{ index: 0, message: { role: "assistant", content: "tok ".repeat(count) }, finish_reason: "stop" }],
          usage,
        });
      }
      res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
      const event = (choices, extra = {}) =>
        `data: ${JSON.stringify({ id, object: "chat.completion.chunk", created, model, system_fingerprint: "fp_ollama", choices, ...extra })}\n\n`;
      for (let i = 0; i < count && !closed; i++) {
        if (i > 0) await sleep(state.chunkMs);
        res.write(event([{ index: 0, delta: { role: "assistant", content: "tok " }, finish_reason: null }]));
      }
      if (closed) return;
      res.write(event([{ index: 0, delta: { role: "assistant", content: "" }, finish_reason: "stop" }]));
      if (body.stream_options?.include_usage) res.write(event([], { usage }));
      res.end("data: [DONE]\n\n");
      return;
    }
    if (req.method === "POST" && route === "/api/generate") {
      const final = {
        model,
        created_at: new Date().toISOString(),
        response: "",
        done: true,
        done_reason: "stop",
        total_duration: (state.delayMs + state.chunkMs * count) * 1e6,
        load_duration: 1e6,
        prompt_eval_count: promptTokens,
        prompt_eval_duration: state.delayMs * 1e6,
        eval_count: count,
        eval_duration: Math.max(1, state.chunkMs * count) * 1e6,
      };
      if (body.stream === false) {
        await sleep(state.chunkMs * (count - 1));
        return json(200, { ...final, response: "tok ".repeat(count) });
      }
      res.writeHead(200, { "content-type": "application/x-ndjson" });
      for (let i = 0; i < count && !closed; i++) {
        if (i > 0) await sleep(state.chunkMs);
        res.write(
          `${JSON.stringify({ model, created_at: new Date().toISOString(), response: "tok ", done: false })}\n`,
        );
      }
      if (!closed) res.end(`${JSON.stringify(final)}\n`);
      return;
    }
    json(404, { error: "404 page not found" });
  });
  server.keepAliveTimeout = 30_000;
  server.maxConnections = 10_000;
  await new Promise((resolve) => server.listen(port, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${port}`,
    port,
    state,
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections?.();
        server.close(resolve);
      }),
  };
}
