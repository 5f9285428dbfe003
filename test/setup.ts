import { runInDurableObject } from "cloudflare:test";
import { waitForGlobalWaitUntil } from "cloudflare:test-internal";
import { env } from "cloudflare:workers";
import { afterAll } from "vitest";
import { OUTBOX_SENDER } from "../src/webhooks/wake";
import { freshState } from "./support/fresh";
import { installInstantSleep } from "./support/timing";

await freshState();
installInstantSleep();

/** Long enough for any wake in flight; a file that leaves a stream unread never settles its own. */
const BACKGROUND_BOUND_MS = 500;

/**
 * A Durable Object call made in the background (a keeper's `waitUntil` wake of the webhook
 * sender, the sender's alarm that wake sets) loads the worker's module through vitest's RPC.
 * Vitest rejects what is still pending when the file ends, and the run fails with "Closing rpc
 * while 'resolve' was pending" though every test passed. So a file ends only after its
 * `waitUntil`s (bounded) and with the sender's alarm run or removed: a call to the sender waits
 * for an alarm it is running.
 */
afterAll(async () => {
  await Promise.race([
    waitForGlobalWaitUntil().catch(() => undefined),
    new Promise((resolve) => setTimeout(resolve, BACKGROUND_BOUND_MS)),
  ]);
  await runInDurableObject(env.WEBHOOK_SENDER.getByName(OUTBOX_SENDER), (_sender, state) =>
    state.storage.deleteAlarm(),
  );
});
