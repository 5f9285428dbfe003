import type { Provider } from "./types";

export interface VastOptions { apiKey: string; baseUrl: string; fetch?: typeof fetch }
export function createVastProvider(_options: VastOptions): Provider {
  throw new Error("vast adapter: not built yet");
}
