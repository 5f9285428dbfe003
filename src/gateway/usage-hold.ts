import type { UsageSample } from "./usage";

/**
 * Finished requests' usage, held in this isolate until the next request to the same lease asks
 * its keeper for admission: the samples ride on that call, so a busy lease costs one keeper call
 * per request. A sample that no request picks up within the hold is sent on its own; each sample
 * leaves the hold exactly once, so every answered request is counted once.
 */
const held = new Map<string, UsageSample[]>();

/** More than this many waiting for one lease: sent at once rather than held on. */
const MAX_HELD = 500;

/** The samples waiting for `leaseId`, taken out of the hold (the caller sends them). */
export function takeHeld(leaseId: string): UsageSample[] {
  const samples = held.get(leaseId);
  if (!samples) return [];
  held.delete(leaseId);
  return samples;
}

/**
 * Holds one request's sample for `holdMs` (0: sends it at once); `send` hands samples to the
 * lease's keeper. The wait runs in `ctx.waitUntil`, after the answer has gone.
 */
export function holdUsage(
  leaseId: string,
  sample: UsageSample,
  holdMs: number,
  ctx: { waitUntil(promise: Promise<unknown>): void },
  send: (samples: UsageSample[]) => Promise<unknown>,
): void {
  const samples = held.get(leaseId) ?? [];
  samples.push(sample);
  held.set(leaseId, samples);
  // Only a sample's own wait sends it: a busy lease's later samples are left to the next request.
  const sendLeft = () => {
    if (!held.get(leaseId)?.includes(sample)) return Promise.resolve();
    return send(takeHeld(leaseId)).catch(() => undefined);
  };
  if (holdMs === 0 || samples.length >= MAX_HELD) {
    ctx.waitUntil(sendLeft());
    return;
  }
  ctx.waitUntil(new Promise((resolve) => setTimeout(resolve, holdMs)).then(sendLeft));
}
