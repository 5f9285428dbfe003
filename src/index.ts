import { settleMoneySettings } from "./account/money-settings";
import { createApp } from "./app";
import { reconcileBilling } from "./billing/reconcile";
import { loadSettings } from "./config";
import { runReaper } from "./reaper/reaper";
import { pruneHistory } from "./retention/prune";
import { runDispatcher } from "./schedules/dispatcher";
import { createServices } from "./services";
import { DISPATCHER_CRON, REAPER_CRON } from "./worker-crons";

export { RateLimiter } from "./auth/rate-limiter";
export { EndpointDO } from "./endpoints/endpoint-do";
export { LeaseKeeper } from "./keeper/keeper";
export { OffersCache } from "./offers/shared-cache";
export { SimCloud } from "./sim/cloud";
export { WebhookSender } from "./webhooks/sender";

const app = createApp();

export default {
  fetch: app.fetch,
  async scheduled(controller, env, _ctx) {
    // Never throws before the reaper: a malformed var is logged, and the reaper runs on the last
    // valid settings (or the defaults); no schedule rents on settings nobody meant, but the
    // dispatcher still enforces the budget.
    const settings = loadSettings(env);
    const { invalid } = settings;
    let services = createServices(env, settings.config);
    if (invalid.length) services.log.error("config_invalid", { invalid });
    // Fail closed: a malformed budget is the last valid one the ledger keeps, never "no budget".
    try {
      const money = await settleMoneySettings(services.db, settings, services.clock());
      if (money.restored.length || money.unknown.length)
        services.log.error("money_settings_restored", { restored: money.restored, unknown: money.unknown });
      if (money.restored.length) services = createServices(env, money.config);
    } catch (error) {
      services.log.error("money_settings_unavailable", { error });
    }
    switch (controller.cron) {
      case DISPATCHER_CRON:
        // Then the webhook outbox: catches up anything a lost wake left (at most a minute late).
        // Awaited, not left to waitUntil: the invocation (and `wrangler dev`'s /__scheduled, which
        // the README fires by hand before reading what the run did) ends when its work has.
        await runDispatcher(services, controller.scheduledTime, { schedules: invalid.length === 0 }).finally(() =>
          services.outbox.wake(),
        );
        break;
      case REAPER_CRON:
        // After the reaper, what the providers billed beside the ledger (src/billing), then the
        // pruning of old history (src/retention); their own failures never fail the reaper run.
        // Then the webhook outbox.
        await runReaper(services)
          .then(async (run) => {
            if (run.mode === "enforce")
              await reconcileBilling(services).catch((error) =>
                services.log.warn("billing_reconciliation_failed", { error }),
              );
          })
          .finally(() => pruneHistory(services).catch((error) => services.log.warn("retention_failed", { error })))
          .finally(() => services.outbox.wake());
        break;
      default:
        services.log.warn("unknown_cron", { cron: controller.cron });
    }
  },
} satisfies ExportedHandler<Env>;
