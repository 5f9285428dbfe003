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

// Response builders live in respond.ts (no vitest import) so the fakes also run as plain HTTP servers.
export { json } from "./respond";
