import { invocationTiming } from "../../src/services";

/** Every wait the worker asked for (backoff, lookups) since the file started, in ms. */
export const requestedWaits: number[] = [];

/**
 * Makes every Services the worker builds wait for nothing: the HTTP client's backoff, Vast's
 * create backoff and the label lookup retries return at once, so suites spend their time on
 * work, not on idle timers. Installed for every workerd suite by test/setup.ts.
 */
export function installInstantSleep(): void {
  invocationTiming.sleep = async (waitMs) => {
    requestedWaits.push(waitMs);
  };
}
