import { Hold } from "../lib/hold";

/**
 * Ended requests' releases (their replica has one request less in flight), held until the next
 * request to the same endpoint calls its object (src/lib/hold.ts), as the lease gateway's usage
 * is: a busy endpoint costs one call to its object per request.
 */

/** One ended request: its ticket, and whether the machine answered it. */
export interface Release {
  ticket: string;
  ok: boolean;
}

const releases = new Hold<Release>();

/** The releases waiting for `endpointId`, taken out of the hold (the caller sends them). */
export const takeReleases = (endpointId: string): Release[] => releases.take(endpointId);

/** Holds one release for `holdMs` (0: sends it at once); `send` hands releases to the endpoint's object. */
export const holdRelease: (...args: Parameters<Hold<Release>["add"]>) => void = (...args) => releases.add(...args);
