/** The two crons of wrangler.toml; `controller.cron` carries the configured string exactly. */
export const DISPATCHER_CRON = "* * * * *";
export const REAPER_CRON = "*/10 * * * *";
