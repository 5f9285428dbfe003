import { vi } from "vitest";

/** A fake of one remote service, speaking its real wire format. */
export interface FakeService {
  /** true when this fake answers requests for `url` */
  handles(url: URL): boolean;
  handle(request: Request): Promise<Response>;
}

export interface InstalledFakes {
  /** every request that reached a fake, in order */
  readonly requests: Request[];
  restore(): void;
}

/**
 * Routes every outbound fetch of this test file's isolate (the worker, its Durable Objects,
 * the test itself) to the given fakes. Anything no fake handles fails loudly with 599, like the
 * outboundService tripwire: no test ever reaches a network.
 */
export function installFakes(...services: FakeService[]): InstalledFakes {
  const requests: Request[] = [];
  const spy = vi.spyOn(globalThis, "fetch").mockImplementation(async (input, init) => {
    const request = new Request(input, init);
    const url = new URL(request.url);
    const service = services.find((s) => s.handles(url));
    if (!service) return new Response(`no fake for ${request.method} ${request.url}`, { status: 599 });
    requests.push(request.clone());
    return service.handle(request);
  });
  return { requests, restore: () => spy.mockRestore() };
}

/** A JSON response, as the fakes send them. */
export function json(body: unknown, status = 200, headers: Record<string, string> = {}): Response {
  return new Response(JSON.stringify(body), {
    status,
    headers: { "Content-Type": "application/json", ...headers },
  });
}

/** Plain text, as Cloudflare fronts and rate limiters send it. */
export function text(body: string, status: number, headers: Record<string, string> = {}): Response {
  return new Response(body, { status, headers: { "Content-Type": "text/plain", ...headers } });
}
