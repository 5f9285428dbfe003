import { createApp } from "./app";
import { reconcileBilling } from "./billing/reconcile";
import { loadSettings } from "./config";
import { DISPATCHER_CRON, REAPER_CRON } from "./cron";
import { runReaper } from "./reaper/reaper";
import { pruneHistory } from "./retention/prune";
import { runDispatcher } from "./schedules/dispatcher";
import { createServices } from "./services";

export { RateLimiter } from "./auth/rate-limiter";
export { LeaseKeeper } from "./keeper/keeper";
export { OffersCache } from "./offers/shared-cache";
export { SimCloud } from "./sim/cloud";
export { WebhookSender } from "./webhooks/sender";

const app = createApp();

export default {
  fetch: app.fetch,
  async scheduled(controller, env, ctx) {
    // Never throws before the reaper: a malformed var is logged, and the reaper runs on the last
    // valid settings (or the defaults); no schedule rents on settings nobody meant.
    const { config, invalid } = loadSettings(env);
    const services = createServices(env, config);
    if (invalid.length) services.log.error("config_invalid", { invalid });
    switch (controller.cron) {
      case DISPATCHER_CRON:
        // Then the webhook outbox: catches up anything a lost wake left (at most a minute late).
        if (invalid.length) {
          services.log.error("dispatcher_skipped", { reason: "invalid configuration", invalid });
          ctx.waitUntil(services.outbox.wake());
        } else ctx.waitUntil(runDispatcher(services, controller.scheduledTime).finally(() => services.outbox.wake()));
        break;
      case REAPER_CRON:
        // After the reaper, what the providers billed beside the ledger (src/billing), then the
        // pruning of old history (src/retention); their own failures never fail the reaper run.
        // Then the webhook outbox.
        ctx.waitUntil(
          runReaper(services)
            .then(async (run) => {
              if (run.mode === "enforce")
                await reconcileBilling(services).catch((error) =>
                  services.log.warn("billing_reconciliation_failed", { error }),
                );
            })
            .finally(() => pruneHistory(services).catch((error) => services.log.warn("retention_failed", { error })))
            .finally(() => services.outbox.wake()),
        );
        break;
      default:
        services.log.warn("unknown_cron", { cron: controller.cron });
    }
  },
} satisfies ExportedHandler<Env>;
