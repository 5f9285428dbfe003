// The Ollama registry fake (test/fakes/ollama-registry.ts: manifests, blobs that redirect to a
// CDN, byte ranges) as a plain-HTTP server on loopback, for the e2e suite and the benches. Point
// a local worker at it with `--var OLLAMA_REGISTRY_URL:<url>`: the worker sizes models from it and
// the sim's machines pull their manifests from it.
import { freePort } from "../../scripts/lib/local-worker.mjs";
import { loadFakes, serveFake } from "./fake-cloud.mjs";

/** Loopback paths that stand for a CDN host the registry redirects blobs to. */
const CDN = /^\/__cdn\/([^/]+)(\/.*)$/;

/**
 * Starts the registry fake on `port` (a free one by default). The registry's blob redirects name
 * CDN hosts that do not resolve here; their Location is rewritten to `<url>/__cdn/<host>/...`,
 * which this server maps back, so a client follows them as it would the real ones.
 * `requests()`: every request so far, `{at, kind: "manifest" | "blob" | "cdn", url, range}`.
 */
export async function startFakeRegistry({ port } = {}) {
  port ??= await freePort();
  const url = `http://127.0.0.1:${port}`;
  const mod = await loadFakes();
  const registry = new mod.OllamaRegistryFake(url);
  const loopback = {
    quirks: {},
    async handle(request) {
      const response = await registry.handle(request);
      const location = response.headers.get("Location");
      if (!location) return response;
      const target = new URL(location);
      const headers = new Headers(response.headers);
      headers.set("Location", `${url}/__cdn/${target.host}${target.pathname}${target.search}`);
      return new Response(response.body, { status: response.status, headers });
    },
  };
  const { server, state } = await serveFake(loopback, port, (path) => {
    const cdn = CDN.exec(path);
    return cdn ? `https://${cdn[1]}${cdn[2]}` : `${url}${path}`;
  });
  return {
    url,
    registry,
    /** the models it serves: `models.llama32_1b` is llama3.2:1b */
    models: mod.FAKE_MODELS,
    /** the sim's Ollama constants (load speed and the like), as src/sim/ollama/machine.ts has them */
    simOllamaSwitches: mod.SIM_OLLAMA_SWITCHES,
    requests: () =>
      // serveFake logs every request it hands on, the fake records each it answers: one each, in order.
      registry.requests.map((r, i) => ({ at: state.log[i]?.at ?? null, kind: r.kind, url: r.url, range: r.range })),
    close: () => new Promise((resolve) => server.close(resolve)),
  };
}
