import { env } from "cloudflare:workers";
import { createApp } from "../../src/app";
import { loadConfig } from "../../src/config";
import type { ProviderRegistry } from "../../src/providers/registry";
import {
  type OfferQuery,
  type Provider,
  type ProviderName,
  type ProviderOffer,
  providerNames,
} from "../../src/providers/types";
import { createServices, type Services } from "../../src/services";
import { ADMIN_TOKEN } from "../helpers";

/** A provider that only lists offers; everything else is out of scope for the offers tests. */
export interface StubProvider extends Provider {
  readonly calls: OfferQuery[];
}

export function stubProvider(
  name: ProviderName,
  list: (query: OfferQuery) => Promise<ProviderOffer[]> | ProviderOffer[],
): StubProvider {
  const calls: OfferQuery[] = [];
  const unused = () => Promise.reject(new Error("not used by the offers tests"));
  return {
    name,
    currency: name === "vramfarm" ? "EUR" : "USD",
    labelled: name !== "vramfarm",
    billingStartsAt: name === "vramfarm" ? "running" : "accepted",
    minimumBilledMinutes: name === "vramfarm" ? 15 : 0,
    calls,
    listOffers: async (query) => {
      calls.push(query);
      return list(query);
    },
    rent: unused,
    status: unused,
    terminate: unused,
    findByLabel: unused,
    listOwn: unused,
    balance: unused,
    ollamaProbe: () => Promise.resolve({ phase: "down" as const }),
  };
}

export function registryOf(providers: Partial<Record<ProviderName, Provider | (() => Provider)>>): ProviderRegistry {
  const get = (name: ProviderName): Provider | null => {
    const entry = providers[name];
    return typeof entry === "function" ? entry() : (entry ?? null);
  };
  return {
    get,
    configured: () => providerNames.map(get).filter((p): p is Provider => p !== null),
    isConfigured: (name) => get(name) !== null,
  };
}

export interface TestWorld {
  services: Services;
  now: number;
  /** GET through the real app (auth, validation, envelope) with these services */
  get(path: string): Promise<Response>;
}

export function world(providers: ProviderRegistry, start = Date.parse("2026-11-29T02:00:00Z")): TestWorld {
  const w = { now: start } as TestWorld;
  const base = createServices(env, loadConfig(env));
  w.services = { ...base, providers, clock: () => w.now };
  const app = createApp({ services: () => w.services });
  w.get = async (path) => app.request(path, { headers: { Authorization: `Bearer ${ADMIN_TOKEN}` } }, env);
  return w;
}
