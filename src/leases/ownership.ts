import { hasScope } from "../auth/middleware";
import type { Caller } from "../services";
import type { Lease } from "./schema";

/**
 * Whose lease a caller may change and whose machine it may reach (README "Tokens and scopes"):
 * the token that rented the lease, or an admin. A lease rented by a schedule or by the admin
 * token has no renting token (token_id null): only admins.
 */
export function rentedByOrAdmin(caller: Caller, tokenId: string | null): boolean {
  return hasScope(caller, "admin") || (caller.tokenId !== null && caller.tokenId === tokenId);
}

/**
 * The lease as `caller` may see it: `access` (the machine's own URLs, an Ollama there that asks
 * nobody for a key, and its SSH address) only for the renter and admins, else null.
 */
export function leaseFor<T extends Pick<Lease, "access">>(caller: Caller, tokenId: string | null, lease: T): T {
  return rentedByOrAdmin(caller, tokenId) ? lease : { ...lease, access: null };
}
