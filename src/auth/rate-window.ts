/** How long a request stays counted against its token. */
export const WINDOW_MS = 60_000;

export interface RateLimits {
  requestsPerMin: number;
  rentalsPerMin: number;
}

/** Start times (ms) of the admitted requests and rentals of one token still inside the window. */
export interface WindowLog {
  requests: number[];
  rentals: number[];
}

export type Admission = { admitted: true } | { admitted: false; limit: "requests" | "rentals"; retryAfterS: number };

export const emptyLog = (): WindowLog => ({ requests: [], rentals: [] });

/**
 * Sliding-log limiter: admits the request when fewer than the limit were admitted in the last
 * minute, and records it in `log` (mutated). A refused request is not recorded, so a client that
 * keeps retrying is let in again as soon as its oldest counted request leaves the window.
 * A rental counts against both limits.
 */
export function admit(log: WindowLog, now: number, rental: boolean, limits: RateLimits): Admission {
  log.requests = inWindow(log.requests, now);
  log.rentals = inWindow(log.rentals, now);
  if (log.requests.length >= limits.requestsPerMin) {
    return { admitted: false, limit: "requests", retryAfterS: retryAfter(log.requests, limits.requestsPerMin, now) };
  }
  if (rental && log.rentals.length >= limits.rentalsPerMin) {
    return { admitted: false, limit: "rentals", retryAfterS: retryAfter(log.rentals, limits.rentalsPerMin, now) };
  }
  log.requests.push(now);
  if (rental) log.rentals.push(now);
  return { admitted: true };
}

function inWindow(times: number[], now: number): number[] {
  const first = times.findIndex((at) => at > now - WINDOW_MS);
  return first === -1 ? [] : first === 0 ? times : times.slice(first);
}

/** Seconds until enough counted requests have left the window for one more to fit (1..60). */
function retryAfter(times: number[], limit: number, now: number): number {
  // After lowering a limit the log may hold more than `limit`: wait for the excess to age out too.
  const freesUp = times[times.length - limit] ?? now;
  const seconds = Math.ceil((freesUp + WINDOW_MS - now) / 1000);
  return Math.min(Math.max(seconds, 1), WINDOW_MS / 1000);
}
