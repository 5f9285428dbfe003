import { rateLimitKey } from "../auth/middleware";
import type { RateLimiter } from "../auth/rate-limiter";
import type { Admission } from "../auth/rate-window";
import type { Caller, Services } from "../services";

/**
 * Sign-in attempts a minute from one client address, failed ones included: guessing tokens from
 * one address is held to this. A person signs in a few times a day; a shared office address
 * still has room.
 */
export const SIGN_INS_PER_ADDRESS_PER_MIN = 10;
/** Sessions opened a minute with one token, from any address: each one writes a D1 row. */
export const SIGN_INS_PER_TOKEN_PER_MIN = 5;

export type SignInRefusal = { limit: "address" | "token"; perMin: number; retryAfterS: number };

/**
 * The client's address as Cloudflare saw it. Absent only off Cloudflare (tests, some local
 * setups), where every such request shares one budget.
 */
export const clientAddress = (req: { header(name: string): string | undefined }): string =>
  req.header("cf-connecting-ip")?.trim().slice(0, 64) || "unknown";

/** Counts one sign-in attempt from `address`; the refusal when it is over its minute's budget. */
export function admitAddress(services: Services, address: string): Promise<SignInRefusal | null> {
  return admitOne(services, `sign-in:address:${address}`, "address", SIGN_INS_PER_ADDRESS_PER_MIN);
}

/** Counts one session opened with `caller`'s token; the refusal when it is over its budget. */
export function admitToken(services: Services, caller: Caller): Promise<SignInRefusal | null> {
  return admitOne(services, `sign-in:token:${rateLimitKey(caller)}`, "token", SIGN_INS_PER_TOKEN_PER_MIN);
}

// The keys carry a "sign-in:" prefix so these windows never share a RateLimiter with the
// token's /v1 budget (keyed by the bare token id) or the gateway's ("infer:").
async function admitOne(
  services: Services,
  key: string,
  limit: SignInRefusal["limit"],
  perMin: number,
): Promise<SignInRefusal | null> {
  const limiters = services.env.RATE_LIMITER as DurableObjectNamespace<RateLimiter>;
  let admission: Admission;
  try {
    admission = await limiters
      .getByName(key)
      .admit({ rental: false, limits: { requestsPerMin: perMin, rentalsPerMin: perMin } });
  } catch (err) {
    // Fail open, as the API does: the per-token session cap still bounds the rows a token holds.
    services.log.error("rate_limiter_unavailable", { outcome: "sign-in let through", limit, error: err });
    return null;
  }
  return admission.admitted ? null : { limit, perMin, retryAfterS: admission.retryAfterS };
}
