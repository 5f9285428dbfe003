import type { ProviderName } from "../providers/catalogue";
import type { Services } from "../services";

/** How the worker reaches a lease's machine: the provider's own way (the sim's are in-process), else fetch. */
export function machineSender(services: Services, provider: ProviderName | null): Fetcher["fetch"] {
  const machineFetch = provider ? services.providers.get(provider)?.machineFetch : undefined;
  return machineFetch
    ? (input, init) => machineFetch(new Request(input as RequestInfo, init))
    : (input, init) => fetch(input, init);
}
