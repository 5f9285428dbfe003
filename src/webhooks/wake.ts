import { createLogger } from "../lib/log";
import { secretsOfEnv } from "../lib/scrub";

/** The one webhook sender's name: it delivers the whole outbox. */
export const OUTBOX_SENDER = "outbox";

/** Wakes the sender; never throws (a lost wake is caught up by the next cron tick). */
export async function wakeOutbox(env: Env): Promise<void> {
  try {
    await env.WEBHOOK_SENDER.getByName(OUTBOX_SENDER).wake();
  } catch (error) {
    createLogger(secretsOfEnv(env)).error("webhook_wake_failed", { error });
  }
}
