import { DurableObject } from "cloudflare:workers";

/** The simulated cloud: machines, boot delay, lingering after terminate, switchable faults. */
export class SimCloud extends DurableObject<Env> {}
