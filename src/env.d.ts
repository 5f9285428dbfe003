// Provider keys are optional secrets: wrangler.toml requires only ADMIN_TOKEN, so `wrangler types`
// leaves them out of Env. A provider without its key is listed as not_configured (src/config.ts).
declare namespace Cloudflare {
  interface Env {
    RUNPOD_API_KEY?: string;
    VAST_API_KEY?: string;
    VRAMFARM_TOKEN?: string;
  }
}
