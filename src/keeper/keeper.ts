import { DurableObject } from "cloudflare:workers";

/** One per lease: the only writer of its status after creation, driven by its alarm. */
export class LeaseKeeper extends DurableObject<Env> {}
