import { createApp } from "./app";
import { loadConfig } from "./config";
import { DISPATCHER_CRON, REAPER_CRON } from "./cron";
import { runReaper } from "./reaper/reaper";
import { runDispatcher } from "./schedules/dispatcher";
import { createServices } from "./services";

export { RateLimiter } from "./auth/rate-limiter";
export { LeaseKeeper } from "./keeper/keeper";
export { OffersCache } from "./offers/shared-cache";
export { SimCloud } from "./sim/cloud";

const app = createApp();

export default {
  fetch: app.fetch,
  async scheduled(controller, env, ctx) {
    const services = createServices(env, loadConfig(env));
    switch (controller.cron) {
      case DISPATCHER_CRON:
        ctx.waitUntil(runDispatcher(services, controller.scheduledTime));
        break;
      case REAPER_CRON:
        ctx.waitUntil(runReaper(services));
        break;
      default:
        console.warn(`scheduled: unknown cron "${controller.cron}"`);
    }
  },
} satisfies ExportedHandler<Env>;
