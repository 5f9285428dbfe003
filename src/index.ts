import { createApp } from "./app";
import { loadSettings } from "./config";
import { DISPATCHER_CRON, REAPER_CRON } from "./cron";
import { runReaper } from "./reaper/reaper";
import { runDispatcher } from "./schedules/dispatcher";
import { createServices } from "./services";
import { wakeOutbox } from "./webhooks/sender";

export { RateLimiter } from "./auth/rate-limiter";
export { LeaseKeeper } from "./keeper/keeper";
export { SimCloud } from "./sim/cloud";
export { WebhookSender } from "./webhooks/sender";

const app = createApp();

export default {
  fetch: app.fetch,
  async scheduled(controller, env, ctx) {
    // Never throws before the reaper: a malformed var is logged, and the reaper runs on the last
    // valid settings (or the defaults); no schedule rents on settings nobody meant.
    const { config, invalid } = loadSettings(env);
    if (invalid.length) console.error(`invalid configuration: ${invalid.join("; ")}`);
    const services = createServices(env, config);
    switch (controller.cron) {
      case DISPATCHER_CRON:
        // Then the webhook outbox: catches up anything a lost wake left (at most a minute late).
        if (invalid.length) {
          console.error("dispatcher skipped until the configuration is fixed");
          ctx.waitUntil(wakeOutbox(env));
        } else ctx.waitUntil(runDispatcher(services, controller.scheduledTime).finally(() => wakeOutbox(env)));
        break;
      case REAPER_CRON:
        ctx.waitUntil(runReaper(services).finally(() => wakeOutbox(env)));
        break;
      default:
        services.log.warn("unknown_cron", { cron: controller.cron });
    }
  },
} satisfies ExportedHandler<Env>;
