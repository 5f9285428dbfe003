// The test fakes of RunPod, Vast.ai and VRAMfarm as plain-HTTP servers on loopback, for benches
// and for trying the local worker against "real" provider wire formats:
//
//   node bench/lib/fake-cloud.mjs [--delay-ms 300] [--boot-ms 5000] [--linger-ms 3000]
//
// prints the `npm start -- --var ...` arguments that point the worker at them.
import { createServer } from "node:http";
import { pathToFileURL } from "node:url";
import { importBundled } from "./esbuild-entry.mjs";

/** Builds the fakes bundle (esbuild ships with wrangler) and imports it. */
export async function loadFakes() {
  return importBundled("fakes-entry.ts", "fakes");
}

async function toWebRequest(req, url) {
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  const body = chunks.length ? Buffer.concat(chunks) : undefined;
  const headers = new Headers();
  for (const [name, value] of Object.entries(req.headers)) {
    if (typeof value === "string") headers.set(name, value);
  }
  return new Request(url, {
    method: req.method,
    headers,
    body: req.method === "GET" || req.method === "HEAD" ? undefined : body,
  });
}

/**
 * Serves one fake on `port`. `rewrite(path)` maps the loopback path to the URL the fake expects.
 * `POST /__control {"delay_ms", "quirks", "fault", ...}` changes behaviour at run time (`fault`
 * queues a fault on a fake that has them, e.g. RunPod's 429 with Retry-After); every provider
 * answer is delayed by delay_ms (the "provider answers after D ms" of the offers bench).
 */
export function serveFake(fake, port, rewrite, state = { delayMs: 0, calls: 0 }) {
  state.log ??= []; // {at, method, url, body} of every provider request, for benches
  const server = createServer(async (req, res) => {
    try {
      const path = req.url ?? "/";
      if (path === "/__control") {
        const control = JSON.parse((await (await toWebRequest(req, `http://x${path}`)).text()) || "{}");
        if (typeof control.delay_ms === "number") state.delayMs = control.delay_ms;
        if (control.quirks) Object.assign(fake.quirks, control.quirks);
        if (control.reset_calls) state.calls = 0;
        if (control.plant && typeof fake.plant === "function") fake.plant(control.plant);
        // {"fault": {"operation": "deploy", "fault": {kind: "status", status: 429, ...}, "times": 2}}
        if (control.fault && typeof fake.fault === "function")
          fake.fault(control.fault.operation, control.fault.fault, control.fault.times ?? 1);
        res.writeHead(200, { "content-type": "application/json" });
        res.end(JSON.stringify({ ok: true, calls: state.calls, delay_ms: state.delayMs }));
        return;
      }
      state.calls += 1;
      const request = await toWebRequest(req, rewrite(path));
      state.log.push({ at: Date.now(), method: request.method, url: request.url, body: await request.clone().text() });
      if (state.delayMs > 0) await new Promise((r) => setTimeout(r, state.delayMs));
      const response = await fake.handle(request);
      res.writeHead(response.status, Object.fromEntries(response.headers));
      res.end(Buffer.from(await response.arrayBuffer()));
    } catch (err) {
      res.writeHead(500, { "content-type": "text/plain" });
      res.end(String(err));
    }
  });
  return new Promise((resolve) => server.listen(port, "127.0.0.1", () => resolve({ server, state })));
}

/** Starts all three fakes; returns them with the wrangler --var arguments that reach them. */
export async function startFakeCloud({ basePort = 9301, delayMs = 0, bootMs = 5_000, lingerMs = 3_000 } = {}) {
  const mod = await loadFakes();
  const runpod = new mod.RunpodFake({ proxyDomain: "proxy.runpod.fake" });
  const vast = new mod.VastFake({ bootMs, lingerMs });
  const vramfarm = new mod.VramfarmFake({ bootMs });
  // RunPod keeps boot and linger as quirks; a lingering pod reads RUNNING (the worst case).
  Object.assign(runpod.quirks, { bootMs, lingerMs, lingerShowsAs: "RUNNING" });
  for (const fake of [vast, vramfarm]) {
    if (fake.model) {
      fake.model.bootMs = bootMs;
      fake.model.lingerMs = lingerMs;
    }
  }
  const states = [0, 1, 2].map(() => ({ delayMs, calls: 0 }));
  const [rp, vs, vf] = await Promise.all([
    serveFake(
      runpod,
      basePort,
      (path) => {
        // http://127.0.0.1:PORT/proxy/{id}-{port}/api/version -> RunPod's proxy host for that pod
        const proxy = /^\/proxy\/([a-z0-9]+-\d+)(\/.*)?$/.exec(path);
        return proxy ? `http://${proxy[1]}.proxy.runpod.fake${proxy[2] ?? "/"}` : `http://runpod.fake${path}`;
      },
      states[0],
    ),
    serveFake(vast, basePort + 1, (path) => `http://vast.fake${path}`, states[1]),
    serveFake(vramfarm, basePort + 2, (path) => `http://vramfarm.fake${path}`, states[2]),
  ]);
  const vars = {
    RUNPOD_GRAPHQL_URL: `http://127.0.0.1:${basePort}/graphql`,
    RUNPOD_API_URL: `http://127.0.0.1:${basePort}`,
    RUNPOD_PROXY_TEMPLATE: `http://127.0.0.1:${basePort}/proxy/{id}-{port}`,
    VAST_API_URL: `http://127.0.0.1:${basePort + 1}`,
    VRAMFARM_API_URL: `http://127.0.0.1:${basePort + 2}/api`,
    RUNPOD_API_KEY: mod.RUNPOD_FAKE_KEY,
    VAST_API_KEY: mod.VAST_FAKE_KEY,
    VRAMFARM_TOKEN: mod.VRAMFARM_FAKE_TOKEN,
  };
  return {
    fakes: { runpod, vast, vramfarm },
    servers: [rp, vs, vf],
    /** per fake: {calls, log: [{at, method, url}]} of every provider request */
    states: { runpod: states[0], vast: states[1], vramfarm: states[2] },
    vars,
    varArgs: Object.entries(vars).flatMap(([k, v]) => ["--var", `${k}:${v}`]),
    close: () => Promise.all([rp, vs, vf].map(({ server }) => new Promise((r) => server.close(r)))),
  };
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  const arg = (name, fallback) => {
    const i = process.argv.indexOf(`--${name}`);
    return i > 0 ? Number(process.argv[i + 1]) : fallback;
  };
  const cloud = await startFakeCloud({
    delayMs: arg("delay-ms", 0),
    bootMs: arg("boot-ms", 5000),
    lingerMs: arg("linger-ms", 3000),
  });
  console.log("fake RunPod, Vast.ai and VRAMfarm listening on 127.0.0.1:9301-9303");
  console.log(`npm start -- ${cloud.varArgs.map((a) => (a === "--var" ? a : `'${a}'`)).join(" ")}`);
}
