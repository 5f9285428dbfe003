/**
 * Ended requests' releases (their replica has one request less in flight), held in this isolate
 * until the next request to the same endpoint calls its object: they ride on that call, so a busy
 * endpoint costs one call to its object per request, as the lease gateway's usage hold does
 * (src/gateway/usage-hold.ts). A release no request picks up within the hold is sent on its own;
 * each leaves the hold exactly once.
 */

/** One ended request: its ticket, and whether the machine answered it. */
export interface Release {
  ticket: string;
  ok: boolean;
}

const held = new Map<string, Release[]>();

/** More than this many waiting for one endpoint: sent at once rather than held on. */
const MAX_HELD = 500;

/** The releases waiting for `endpointId`, taken out of the hold (the caller sends them). */
export function takeReleases(endpointId: string): Release[] {
  const releases = held.get(endpointId);
  if (!releases) return [];
  held.delete(endpointId);
  return releases;
}

/**
 * Holds one release for `holdMs` (0: sends it at once); `send` hands releases to the endpoint's
 * object. The wait runs in `ctx.waitUntil`, after the answer has gone.
 */
export function holdRelease(
  endpointId: string,
  release: Release,
  holdMs: number,
  ctx: { waitUntil(promise: Promise<unknown>): void },
  send: (releases: Release[]) => Promise<unknown>,
): void {
  const releases = held.get(endpointId) ?? [];
  releases.push(release);
  held.set(endpointId, releases);
  // Only a release's own wait sends it: a busy endpoint's later ones are left to the next request.
  const sendLeft = () => {
    if (!held.get(endpointId)?.includes(release)) return Promise.resolve();
    return send(takeReleases(endpointId)).catch(() => undefined);
  };
  if (holdMs === 0 || releases.length >= MAX_HELD) {
    ctx.waitUntil(sendLeft());
    return;
  }
  ctx.waitUntil(new Promise((resolve) => setTimeout(resolve, holdMs)).then(sendLeft));
}
