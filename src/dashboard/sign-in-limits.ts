import { rateLimitKey } from "../auth/middleware";
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
  // Fails open, as the API does: the per-token session cap still bounds the rows a token holds.
  const admission = await services.rateLimits.admit(
    key,
    { rental: false, limits: { requestsPerMin: perMin, rentalsPerMin: perMin } },
    { log: services.log, outcome: "sign-in let through", fields: { limit } },
  );
  return admission.admitted ? null : { limit, perMin, retryAfterS: admission.retryAfterS };
}
