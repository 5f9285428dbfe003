import type { FakeService } from "../fakes/install";
import { json, text } from "../fakes/respond";

/**
 * One fault switchboard in front of the three wire-faithful fakes: requests are classified into
 * the calls the Provider interface makes (offers, rent, status, terminate, own-machine listing,
 * balance) and a queued fault answers in the provider's own error shapes; everything else goes
 * to the fake. `afterEffect` lets the fake carry the call out first and then answers with the
 * fault (the "created, but the answer was lost" case).
 */

export type FaultyProvider = "runpod" | "vast" | "vramfarm";
export type ProviderCall = "offers" | "rent" | "status" | "terminate" | "listing" | "balance";

export type Fault =
  | { kind: "http"; status: number }
  /** the call hangs until the caller's timeout fires (simulated after HANG_MS, see below) */
  | { kind: "hang" }
  /**
   * The call hangs past the caller's timeout (as "hang"), and the provider carries it out anyway
   * `afterMs` later: a create whose machine appears after gpulease gave up on the answer. Nothing
   * runs in the background: the held request is carried out by the first request that reaches
   * this fake once the clock has passed its moment, so a machine exists from when it can be seen.
   */
  | { kind: "late"; afterMs: number }
  /** HTTP 200, body cut off mid-JSON */
  | { kind: "malformed" }
  /** HTTP 200, empty body */
  | { kind: "empty" }
  /** HTTP 200 carrying the provider's application error */
  | { kind: "error200" }
  /** terminate: answered as success, nothing happens */
  | { kind: "ignore" }
  /** status: answered as "this machine does not exist" although it does */
  | { kind: "gone" }
  /** no fault: the request goes to the fake (interleaves a flapping sequence) */
  | { kind: "pass" }
  /** HTTP `status` whose body echoes the request's Authorization header and URL */
  | { kind: "echo"; status: number };

interface Rule {
  fault: Fault;
  times: number;
  afterEffect: boolean;
}

/**
 * Workers' fetch gives up when the HttpClient's AbortSignal.timeout fires (15 s by default,
 * not configurable through the worker). Waiting that long per call would make the matrix take
 * hours, so a hang ends after HANG_MS with the very error the timeout raises: the adapters see
 * what they would see after a real hang, only sooner.
 */
export const HANG_MS = 5;

export class Faulty implements FakeService {
  private readonly rules: Partial<Record<ProviderCall, Rule[]>> = {};
  /** faults actually served, per call (a scenario whose fault never fired proves nothing) */
  readonly served: Record<ProviderCall, number> = {
    offers: 0,
    rent: 0,
    status: 0,
    terminate: 0,
    listing: 0,
    balance: 0,
  };
  /** what every request to this fake carried, read when it arrived */
  readonly log: { url: string; authorization: string | null; body: string }[] = [];
  /** every request that reached this provider, by call */
  readonly seen: Record<ProviderCall, number> = { offers: 0, rent: 0, status: 0, terminate: 0, listing: 0, balance: 0 };
  /** requests answered with a timeout that the provider still carries out (fault `late`) */
  private readonly held: { request: () => Request; dueAt: number }[] = [];

  constructor(
    readonly provider: FaultyProvider,
    readonly inner: FakeService,
  ) {}

  inject(call: ProviderCall, fault: Fault, options: { times?: number; afterEffect?: boolean } = {}): this {
    this.rules[call] ??= [];
    this.rules[call].push({ fault, times: options.times ?? 1, afterEffect: options.afterEffect ?? false });
    return this;
  }

  /** Drops every queued fault. */
  clear(): void {
    for (const key of Object.keys(this.rules) as ProviderCall[]) delete this.rules[key];
  }

  pending(call: ProviderCall): number {
    return (this.rules[call] ?? []).reduce((sum, rule) => sum + rule.times, 0);
  }

  handles(url: URL): boolean {
    return this.inner.handles(url);
  }

  /** Late calls not carried out yet. */
  get pendingLate(): number {
    return this.held.length;
  }

  /** Carries out the held (`late`) requests whose moment has come, oldest first. */
  async settleLate(): Promise<void> {
    const now = Date.now();
    while (this.held.length > 0 && (this.held[0]?.dueAt ?? Number.POSITIVE_INFINITY) <= now) {
      const due = this.held.shift();
      if (due) await (await this.inner.handle(due.request())).arrayBuffer();
    }
  }

  async handle(request: Request): Promise<Response> {
    await this.settleLate();
    this.log.push({
      url: request.url,
      authorization: request.headers.get("authorization"),
      body: await request.clone().text(),
    });
    const call = await classify(this.provider, request.clone());
    if (!call) return this.inner.handle(request);
    this.seen[call] += 1;
    const rule = this.take(call);
    if (!rule || rule.fault.kind === "pass") return this.inner.handle(request);
    this.served[call] += 1;
    if (rule.fault.kind === "late") {
      // Copied out: a request's body cannot be read from another request's context (a keeper's).
      const { url, method } = request;
      const headers = [...request.headers.entries()];
      const body = await request.clone().arrayBuffer();
      const copy = () => new Request(url, { method, headers, body: body.byteLength > 0 ? body : undefined });
      this.held.push({ request: copy, dueAt: Date.now() + rule.fault.afterMs });
      this.held.sort((a, b) => a.dueAt - b.dueAt);
      return render(this.provider, call, { kind: "hang" }, request);
    }
    if (rule.afterEffect) {
      const done = await this.inner.handle(request.clone());
      await done.arrayBuffer();
    }
    return render(this.provider, call, rule.fault, request);
  }

  private take(call: ProviderCall): Rule | null {
    const queue = this.rules[call];
    const rule = queue?.[0];
    if (!queue || !rule) return null;
    rule.times -= 1;
    if (rule.times <= 0) queue.shift();
    return rule;
  }
}

/** Which Provider call a request to a fake belongs to; null for anything else (Ollama probes). */
export async function classify(provider: FaultyProvider, request: Request): Promise<ProviderCall | null> {
  const url = new URL(request.url);
  const method = request.method;
  switch (provider) {
    case "runpod": {
      if (!url.hostname.startsWith("runpod.")) return null;
      // REST v2 (the default transport); the balance still goes through GraphQL.
      if (url.pathname.startsWith("/v2/")) {
        const path = url.pathname;
        if (method === "GET" && path === "/v2/catalog/gpus") return "offers";
        if (method === "POST" && path === "/v2/pods") return "rent";
        if (method === "GET" && path === "/v2/pods") return "listing";
        if (method === "GET" && /^\/v2\/pods\/[^/]+$/.test(path)) return "status";
        if (method === "DELETE" && /^\/v2\/pods\/[^/]+$/.test(path)) return "terminate";
        return null;
      }
      let query = "";
      try {
        query = String(((await request.json()) as { query?: unknown }).query ?? "");
      } catch {
        return null;
      }
      if (query.includes("podFindAndDeployOnDemand")) return "rent";
      if (query.includes("podTerminate")) return "terminate";
      if (/\bgpuTypes\b|\bdataCenters\b/.test(query)) return "offers";
      if (/\bmyself\b[\s\S]*\bpods\b/.test(query)) return "listing";
      if (/\bmyself\b/.test(query)) return "balance";
      if (/\bpod\s*\(/.test(query)) return "status";
      return null;
    }
    case "vast": {
      const path = url.pathname;
      if (url.hostname !== "vast.fake") return null;
      if (method === "POST" && path === "/api/v0/bundles/") return "offers";
      if (method === "PUT" && /^\/api\/v0\/asks\/\d+\/$/.test(path)) return "rent";
      if (method === "GET" && /^\/api\/v0\/instances\/\d+\/$/.test(path)) return "status";
      if (method === "DELETE" && /^\/api\/v0\/instances\/\d+\/$/.test(path)) return "terminate";
      if (method === "GET" && path === "/api/v1/instances/") return "listing";
      if (method === "GET" && path === "/api/v0/users/current/") return "balance";
      return null;
    }
    case "vramfarm": {
      const path = url.pathname.replace(/^\/api/, "");
      if (url.hostname !== "vramfarm.fake") return null;
      if (method === "GET" && (path === "/offers" || path === "/offer-types")) return "offers";
      if (method === "POST" && path === "/instances") return "rent";
      if (method === "POST" && path === "/instances/stop") return "terminate";
      if (method === "GET" && path === "/instances") return "listing";
      if (method === "GET" && /^\/instances\/[^/]+$/.test(path)) return "status";
      if (method === "GET" && path === "/account") return "balance";
      return null;
    }
  }
}

const RUNPOD_FIELD: Record<ProviderCall, string> = {
  offers: "gpuTypes",
  rent: "podFindAndDeployOnDemand",
  status: "pod",
  terminate: "podTerminate",
  listing: "myself",
  balance: "myself",
};

/** The fault's answer in this provider's wire shapes. */
function render(
  provider: FaultyProvider,
  call: ProviderCall,
  fault: Fault,
  request: Request,
): Promise<Response> | Response {
  const rest = provider === "runpod" && new URL(request.url).pathname.startsWith("/v2/");
  switch (fault.kind) {
    case "pass":
      throw new Error("pass is not rendered");
    case "late":
      throw new Error("late is answered as a hang");
    case "hang":
      return new Promise((_, reject) =>
        setTimeout(() => reject(new DOMException("The operation was aborted due to timeout", "TimeoutError")), HANG_MS),
      );
    case "malformed":
      return new Response(
        provider === "runpod"
          ? '{"data":{"pod":'
          : provider === "vast"
            ? '{"instances": {"id": 27'
            : '{"status": "runn',
        {
          status: 200,
          headers: { "Content-Type": "application/json" },
        },
      );
    case "empty":
      return new Response("", { status: 200, headers: { "Content-Type": "application/json" } });
    case "echo": {
      const leak = `request had authorization: ${request.headers.get("authorization") ?? "none"}, url: ${request.url}`;
      if (rest)
        return problemJson({
          title: "Internal Server Error",
          status: fault.status,
          detail: `Something went wrong (${leak})`,
        });
      if (provider === "runpod")
        return json(
          { errors: [{ message: `Something went wrong (${leak})`, extensions: { code: "INTERNAL_SERVER_ERROR" } }] },
          fault.status,
        );
      if (provider === "vast")
        return json({ success: false, error: "server_error", msg: `Internal error: ${leak}` }, fault.status);
      return json({ error: `internal error: ${leak}`, code: "internal" }, fault.status);
    }
    case "http": {
      const status = fault.status;
      if (provider === "runpod") {
        const body =
          status === 429
            ? "Too Many Requests"
            : status === 502
              ? "<html><body><h1>502 Bad Gateway</h1></body></html>"
              : status === 503
                ? "Service Unavailable"
                : "Internal Server Error";
        return text(body, status);
      }
      if (provider === "vast")
        return status === 429
          ? text("API requests too frequent", 429)
          : text(`<html><body>${status} Server Error</body></html>`, status);
      // VRAMfarm says how long to wait on 429/502/503; "0" because the HttpClient really sleeps.
      const headers: Record<string, string> = status === 500 ? {} : { "Retry-After": "0" };
      return json(
        {
          error: status === 429 ? "too many requests" : "temporarily unavailable",
          code: status === 429 ? "rate_limited" : "unavailable",
        },
        status,
        headers,
      );
    }
    case "error200":
      // REST v2 never answers an error with 200; a problem body under 200 is a body that does not parse as a Pod.
      if (rest) return json({ title: "Internal Server Error", status: 500, detail: "Something went wrong." });
      if (provider === "runpod") {
        return json({
          errors: [
            {
              message: "Something went wrong. Please try again later or contact support.",
              path: [RUNPOD_FIELD[call]],
              extensions: { code: "INTERNAL_SERVER_ERROR" },
            },
          ],
          data: { [RUNPOD_FIELD[call]]: null },
        });
      }
      if (provider === "vast")
        return json({ success: false, error: "server_error", msg: "Internal error, please try again" });
      return json({ error: "internal error", code: "internal" });
    case "ignore":
      if (call !== "terminate") throw new Error("ignore is a terminate fault");
      if (rest) return new Response(null, { status: 204 });
      if (provider === "runpod") return json({ data: { podTerminate: null } });
      if (provider === "vast") return json({ success: true });
      return json({ ok: true });
    case "gone":
      if (call !== "status") throw new Error("gone is a status fault");
      if (rest) return problemJson({ title: "Not Found", status: 404, detail: "pod not found" });
      if (provider === "runpod") return json({ data: { pod: null } });
      if (provider === "vast") return json({ instances: null });
      return json({ error: "no such server", code: "not_found" }, 404);
  }
}

function problemJson(body: { title: string; status: number; detail: string }): Response {
  return new Response(JSON.stringify(body), {
    status: body.status,
    headers: { "Content-Type": "application/problem+json" },
  });
}
