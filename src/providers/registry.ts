import type { Config } from "../config";
import type { Clock, Sleep } from "../lib/time";
import { simModelLibrary } from "../sim/ollama/library-registry";
import { createRunpodProvider } from "./runpod";
import { createRunpodRestProvider } from "./runpod-rest";
import { createSimProvider } from "./sim";
import { type Provider, type ProviderName, providerNames } from "./types";
import { createVastProvider } from "./vast";
import { createVramfarmProvider } from "./vramfarm";

/** The providers of one invocation; a provider without its key is not configured. */
export interface ProviderRegistry {
  /** the adapter, or null when the provider is not configured */
  get(name: ProviderName): Provider | null;
  /** configured providers, in a fixed order */
  configured(): Provider[];
  isConfigured(name: ProviderName): boolean;
}

export function createProviders(env: Env, config: Config, clock: Clock, sleep: Sleep): ProviderRegistry {
  const cache = new Map<ProviderName, Provider | null>();
  const build = (name: ProviderName): Provider | null => {
    const s = config.secrets;
    switch (name) {
      case "runpod": {
        if (!s.providers.RUNPOD_API_KEY) return null;
        const graphql = createRunpodProvider({
          sleep,
          apiKey: s.providers.RUNPOD_API_KEY,
          url: config.runpodGraphqlUrl,
          proxyTemplate: config.runpodProxyTemplate,
          minCudaVersion: config.minCudaVersion,
        });
        if (config.runpodTransport === "graphql") return graphql;
        // REST v2 has no balance endpoint: GraphQL still reads it while it lives (docs/providers.md#runpod-rest-v2).
        return createRunpodRestProvider({
          sleep,
          apiKey: s.providers.RUNPOD_API_KEY,
          baseUrl: config.runpodApiUrl,
          commandFields: config.runpodRestCommandFields,
          proxyTemplate: config.runpodProxyTemplate,
          minCudaVersion: config.minCudaVersion,
          balance: () => graphql.balance(),
        });
      }
      case "vast":
        return s.providers.VAST_API_KEY
          ? createVastProvider({
              sleep,
              apiKey: s.providers.VAST_API_KEY,
              baseUrl: config.vastApiUrl,
              minCudaVersion: config.minCudaVersion,
            })
          : null;
      case "vramfarm":
        return s.providers.VRAMFARM_TOKEN
          ? createVramfarmProvider({
              sleep,
              apiKey: s.providers.VRAMFARM_TOKEN,
              baseUrl: config.vramfarmApiUrl,
              eurUsd: config.eurUsd,
            })
          : null;
      case "sim":
        return config.enableSim
          ? createSimProvider({
              namespace: env.SIM_CLOUD,
              clock,
              publicUrl: config.publicUrl,
              modelLibrary: config.simModels === "library" ? simModelLibrary : undefined,
            })
          : null;
    }
  };
  const get = (name: ProviderName) => {
    if (!cache.has(name)) cache.set(name, build(name));
    return cache.get(name) ?? null;
  };
  return {
    get,
    configured: () => providerNames.map(get).filter((p): p is Provider => p !== null),
    isConfigured: (name) => get(name) !== null,
  };
}
