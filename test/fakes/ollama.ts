import { OLLAMA_VERSION, serveOllama } from "../../src/sim/ollama/http";
import {
  DEFAULT_SWITCHES,
  emptyState,
  type GpuMemory,
  OllamaMachine,
  type OllamaState,
  type OllamaSwitches,
  parseEnv,
} from "../../src/sim/ollama/machine";
import { pullManifest } from "../../src/sim/ollama/registry";
import { text } from "./respond";

/**
 * The Ollama server on the machines of a provider fake (RunPod's proxy URL, a Vast.ai IP:port).
 * It runs the same simulated server as the sim (src/sim/ollama: the shapes of ollama/ollama
 * `docs/api.md` and `server/routes.go`) on the fakes' clock, Date.now, which the tests move:
 * a machine started with GPULEASE_MODEL pulls that model by itself (its container's start
 * command) at `switches.downloadBytesPerS`, then loads it with `keep_alive: -1`; an HTTP pull
 * downloads only while its client stays (Ollama cancels a download nobody waits on).
 */

/** What the provider fake knows about one machine. */
export interface OllamaHostInfo {
  /** when `ollama serve` begins (or began) listening; null: never */
  upAt: number | null;
  /** the container's environment as the provider stores it */
  env: Record<string, string>;
  /** all GPUs together; null: unknown (everything fits) */
  /** the machine's cards, their memory as the driver reports it; null: unknown (then everything fits) */
  gpus: GpuMemory | null;
  image: string | null;
}

export interface OllamaHosts {
  /** the machine's facts now, or undefined when there is no such machine */
  host(id: string): OllamaHostInfo | undefined;
  ids(): string[];
}

/** The call-back a machine's start command sends when its pull failed (see docs/providers.md#ollama). */
export interface OllamaCallback {
  machine: string;
  url: string;
  token: string | null;
  body: { exit_code: number; error: string };
  /** when the pull failed (the script sends it then) */
  at: number;
  delivered: boolean;
}

/** Streams of the fakes look at the (moved) clock every few ms of real time. */
const FAKE_STREAMING = { tickMs: 5, tokenMs: 0, progressEveryMs: 60 };

export class FakeOllama {
  /** in force for every machine of this fake from the next look on (per machine: override()) */
  switches: OllamaSwitches = { ...DEFAULT_SWITCHES };
  /**
   * Where the machines pull manifests from. By default the global fetch, which a test routes to
   * its fakes (test/fakes/install.ts: an OllamaRegistryFake); a test that calls a fake directly
   * passes the registry fake's handle here.
   */
  registry: { url: string; fetch: (request: Request) => Promise<Response> } = {
    url: "https://registry.ollama.ai",
    fetch: (request) => fetch(request),
  };
  private readonly states = new Map<string, OllamaState>();
  private readonly overrides = new Map<string, Partial<OllamaSwitches>>();
  private readonly delivered = new Set<string>();

  constructor(
    private readonly hosts: OllamaHosts,
    private readonly now: () => number = () => Date.now(),
  ) {}

  /** Switches for one machine only (e.g. its model spills to the CPU). */
  override(id: string, switches: Partial<OllamaSwitches>): this {
    this.overrides.set(id, { ...this.overrides.get(id), ...switches });
    return this;
  }

  /** Answers a request that reached a listening server of machine `id`. */
  serve(request: Request, id: string): Promise<Response> {
    const server = this.server(id);
    if (!server) return Promise.resolve(text("Bad Gateway", 502));
    const image = this.hosts.host(id)?.image ?? "";
    const version = /:(\d+\.\d+\.\d+[\w.-]*)$/.exec(image)?.[1] ?? OLLAMA_VERSION;
    return serveOllama(server, request, { ...FAKE_STREAMING, version });
  }

  /** The machine's server state now (tests assert on downloads, pulled and loaded models). */
  async state(id: string): Promise<OllamaState | undefined> {
    const server = this.server(id);
    await server?.prepare();
    server?.settle();
    return server?.state;
  }

  /** Call-backs the machines' start commands have sent by now (pull failures), oldest first. */
  async callbacks(): Promise<OllamaCallback[]> {
    const out: OllamaCallback[] = [];
    for (const id of this.hosts.ids()) {
      const server = this.server(id);
      if (!server) continue;
      if (server.listening()) await server.prepare();
      server.settle();
      const failure = server.state.failure;
      const url = server.host.env.callbackUrl;
      if (!failure || !url) continue;
      out.push({
        machine: id,
        url,
        token: server.host.env.callbackToken,
        body: { exit_code: 1, error: failure.error },
        at: failure.at,
        delivered: this.delivered.has(id),
      });
    }
    return out.sort((a, b) => a.at - b.at);
  }

  /**
   * Sends the call-backs not sent yet, as the start command does (`POST $GPULEASE_CALLBACK_URL`,
   * `Authorization: Bearer $GPULEASE_CALLBACK_TOKEN`). A fake cannot reach the worker by itself
   * (inside a test every fetch is routed to the fakes), so the test passes its own way in, e.g.
   * the worker's fetch handler.
   */
  async deliverCallbacks(send: (request: Request) => Promise<Response>): Promise<Response[]> {
    const responses: Response[] = [];
    for (const callback of await this.callbacks()) {
      if (callback.delivered) continue;
      this.delivered.add(callback.machine);
      const headers: Record<string, string> = { "Content-Type": "application/json" };
      if (callback.token) headers.Authorization = `Bearer ${callback.token}`;
      responses.push(
        await send(new Request(callback.url, { method: "POST", headers, body: JSON.stringify(callback.body) })),
      );
    }
    return responses;
  }

  private server(id: string): OllamaMachine | null {
    const host = this.hosts.host(id);
    if (!host || host.upAt === null) return null;
    let state = this.states.get(id);
    if (!state) {
      state = emptyState();
      this.states.set(id, state);
    }
    const overrides = this.overrides;
    const fake = this;
    return new OllamaMachine(state, {
      now: this.now,
      upAt: host.upAt,
      env: parseEnv(host.env),
      gpus: host.gpus,
      get switches() {
        return { ...fake.switches, ...overrides.get(id) };
      },
      manifest: (name) =>
        pullManifest(name, this.registry.url, (input, init) => this.registry.fetch(new Request(input, init))),
    });
  }
}

/** KEY=value strings (RunPod's env on the wire) as an object. */
export function envOf(entries: string[]): Record<string, string> {
  return Object.fromEntries(
    entries.map((e) => {
      const i = e.indexOf("=");
      return i < 0 ? [e, ""] : [e.slice(0, i), e.slice(i + 1)];
    }),
  );
}
