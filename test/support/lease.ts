import type { Lease } from "../../src/leases/schema";
import { type ApiInit, api } from "../helpers";

/** A sim rental's body: an Ollama 4090 for 30 minutes, with `extra` on top. */
export const simBody = (extra: Record<string, unknown> = {}): Record<string, unknown> => ({
  provider: "sim",
  gpu: "4090",
  max_minutes: 30,
  ...extra,
});

/**
 * A custom-image batch rental at `provider`, with `extra` on top. VRAMfarm rents only custom
 * images with a command, so the suites that rent at every provider use this body there.
 */
export const batchBody = (provider: string, extra: Record<string, unknown> = {}): Record<string, unknown> => ({
  provider,
  gpu: "4090",
  template: "custom",
  image: "ghcr.io/you/batch:1",
  cmd: "python /app/run.py",
  max_minutes: 60,
  ...extra,
});

/** POST /v1/leases as the admin (or `init.token`); the raw answer, for tests of refusals. */
export function rent(body: Record<string, unknown>, init: ApiInit = {}): Promise<Response> {
  return api("/v1/leases", { ...init, method: "POST", json: body });
}

/**
 * Rents and returns the accepted lease; throws with the answer unless it is 202. `seen` gets the
 * body, for suites that check no secret ever appears in one.
 */
export async function rentOk(body: Record<string, unknown>, init: ApiInit & { seen?: string[] } = {}): Promise<Lease> {
  const { seen, ...rest } = init;
  const res = await rent(body, rest);
  const text = await res.text();
  seen?.push(text);
  if (res.status !== 202) throw new Error(`rent: ${res.status} ${text}`);
  return JSON.parse(text) as Lease;
}
