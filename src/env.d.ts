// Provider keys are optional secrets: wrangler.toml requires only ADMIN_TOKEN, so `wrangler types`
// leaves them out of Env. Their names come from the one list (src/providers/catalogue.ts); a
// provider without its key is listed as not_configured.
declare namespace Cloudflare {
  interface Env extends Partial<Record<import("./providers/catalogue").ProviderSecretName, string>> {}
}
