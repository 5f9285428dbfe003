import { createLogger } from "../lib/log";

/** Wakes the sender; never throws (a lost wake is caught up by the next cron tick). */
export async function wakeOutbox(env: Env): Promise<void> {
  try {
    await env.WEBHOOK_SENDER.getByName("outbox").wake();
  } catch (error) {
    createLogger([env.ADMIN_TOKEN, env.RUNPOD_API_KEY, env.VAST_API_KEY, env.VRAMFARM_TOKEN]).error(
      "webhook_wake_failed",
      {
        error,
      },
    );
  }
}
