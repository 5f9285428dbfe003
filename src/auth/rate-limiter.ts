import { DurableObject } from "cloudflare:workers";

/** Per-token request and rental rate limits. */
export class RateLimiter extends DurableObject<Env> {}
