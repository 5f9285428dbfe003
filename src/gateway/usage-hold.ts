import { Hold } from "../lib/hold";
import type { UsageSample } from "./usage";

/**
 * Finished requests' usage, held until the next request to the same lease asks its keeper for
 * admission (src/lib/hold.ts): a busy lease costs one keeper call per request, and every answered
 * request is counted once.
 */
const usage = new Hold<UsageSample>();

/** The samples waiting for `leaseId`, taken out of the hold (the caller sends them). */
export const takeHeld = (leaseId: string): UsageSample[] => usage.take(leaseId);

/** Holds one request's sample for `holdMs` (0: sends it at once); `send` hands samples to the keeper. */
export const holdUsage: (...args: Parameters<Hold<UsageSample>["add"]>) => void = (...args) => usage.add(...args);
