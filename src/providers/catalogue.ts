/**
 * Every provider the worker knows: the one list of their names, how each is shown, and the secret
 * that configures it. Everything else that names a provider reads it from here (the config's
 * secrets, the scrubber, the not-configured reasons); test/app/provider-names.test.ts fails when a
 * provider's name or secret is written elsewhere outside src/providers/.
 */
export const providerCatalogue = {
  runpod: { label: "RunPod", secret: "RUNPOD_API_KEY" },
  vast: { label: "Vast.ai", secret: "VAST_API_KEY" },
  vramfarm: { label: "VRAMfarm", secret: "VRAMFARM_TOKEN" },
  // A development aid switched on by a var, not a key: its absence is news only to someone who asks for it.
  sim: { label: "the simulated cloud", secret: null, enabledBy: "ENABLE_SIM" },
} as const satisfies Record<string, { label: string; secret: string | null; enabledBy?: string }>;

export type ProviderName = keyof typeof providerCatalogue;

/** The providers' names, in the order listings and errors show them. */
export const providerNames = Object.keys(providerCatalogue) as [ProviderName, ...ProviderName[]];

/** The name of a secret that configures a provider (a Worker secret, like ADMIN_TOKEN). */
export type ProviderSecretName = NonNullable<(typeof providerCatalogue)[ProviderName]["secret"]>;

/** Every provider's secret: each is scrubbed from whatever the worker stores, logs or shows. */
export const providerSecretNames: readonly ProviderSecretName[] = providerNames.flatMap((name) => {
  const secret = providerCatalogue[name].secret;
  return secret === null ? [] : [secret];
});

/** Why a provider is not configured, in words for the offers listing's `errors`. */
export function notConfiguredReason(name: ProviderName): string {
  const entry: { label: string; secret: string | null; enabledBy?: string } = providerCatalogue[name];
  return entry.secret !== null ? `${entry.secret} is not set` : `${entry.label} is off (${entry.enabledBy})`;
}

/** Whether a provider's absence is reported in a listing nobody narrowed to it (not for the sim). */
export function reportedWhenAbsent(name: ProviderName): boolean {
  return !("enabledBy" in providerCatalogue[name]);
}

/** The labels of the real clouds, for prose ("RunPod, Vast.ai and VRAMfarm"). */
export function cloudLabels(): string {
  const labels = providerNames.filter(reportedWhenAbsent).map((name) => providerCatalogue[name].label);
  return labels.length > 1 ? `${labels.slice(0, -1).join(", ")} and ${labels.at(-1)}` : (labels[0] ?? "");
}
