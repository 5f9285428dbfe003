import { DurableObject } from "cloudflare:workers";
import { z } from "zod";
import { type Admission, admit, emptyLog, type WindowLog } from "./rate-window";

const AdmitRequestSchema = z.object({
  rental: z.boolean(),
  limits: z.object({ requestsPerMin: z.number().int().positive(), rentalsPerMin: z.number().int().positive() }),
});
export type AdmitRequest = z.infer<typeof AdmitRequestSchema>;

/**
 * Per-token request and rental rate limits: one instance per token key (a token id, or "admin"),
 * called once per authenticated /v1 request.
 *
 * The log lives in memory, not in storage: nothing in it matters after 60 s, and an idle object
 * is evicted only after longer than that, so eviction loses nothing; a restart mid-window (a
 * deploy) can at worst grant one extra minute's budget. In exchange a request costs no storage
 * write and no wait on the output gate. The clock is this object's own, so every worker isolate
 * serving the token is measured against the same time.
 */
export class RateLimiter extends DurableObject<Env> {
  #log: WindowLog = emptyLog();

  /** Counts the request if it fits the limits; no await inside, so concurrent calls cannot interleave. */
  admit(request: AdmitRequest): Admission {
    const { rental, limits } = AdmitRequestSchema.parse(request);
    return admit(this.#log, Date.now(), rental, limits);
  }
}
