import type { Scope } from "../services";

/** What a /v1 request needs: the scope that opens it, and whether it spends a rental. */
export interface AccessRule {
  scope: Scope;
  rental: boolean;
}

const rule = (scope: Scope, rental = false): AccessRule => ({ scope, rental });

/**
 * The one table of who may call what under /v1, decided from the method and path alone so that
 * a route added later is covered without touching it: reads need `read`, every write not listed
 * here needs `admin` (closed by default).
 */
export function accessRuleFor(method: string, path: string): AccessRule {
  const verb = method.toUpperCase();
  // Empty segments are dropped so "/v1//leases" and "/v1/leases/" cannot dodge a rule.
  const [root, resource, id, action, ...rest] = path.split("/").filter(Boolean);
  if (root !== "v1") return rule("admin");
  const depth = [resource, id, action, ...rest].filter((s) => s !== undefined).length;

  // Token management reveals and creates credentials, webhook URLs may carry a receiver's own
  // token (Slack's do): admin even for reading.
  if (resource === "tokens" || resource === "webhooks") return rule("admin");
  if (verb === "GET" || verb === "HEAD") return rule("read");
  // An endpoint rents replicas: creating, changing, deleting it and its key are as much as renting.
  if (resource === "endpoints") {
    if (verb === "POST" && depth === 1) return rule("rent", true);
    if ((verb === "PATCH" || verb === "DELETE") && depth === 2) return rule("rent");
    if (verb === "POST" && depth === 3 && action === "keys") return rule("rent");
    return rule("admin");
  }
  if (verb !== "POST") return rule("admin");

  if (resource === "leases") {
    if (depth === 1) return rule("rent", true);
    if (depth === 2 && id === "stop-all") return rule("admin");
    if (depth === 3 && action === "stop") return rule("stop");
    // A new inference key for one's model lease: as much as renting it.
    if (depth === 3 && action === "inference-key") return rule("rent");
  }
  if (resource === "schedules" && depth === 3 && action === "run") return rule("rent", true);
  return rule("admin");
}

/** The scope a /v1 request needs. */
export function scopeFor(method: string, path: string): Scope {
  return accessRuleFor(method, path).scope;
}

/** True for the requests that rent a machine and count against the rental rate limit. */
export function isRental(method: string, path: string): boolean {
  return accessRuleFor(method, path).rental;
}
