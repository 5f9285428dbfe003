import type { Provider } from "./types";

export interface RunpodOptions { apiKey: string; url: string; proxyTemplate: string; fetch?: typeof fetch }
export function createRunpodProvider(_options: RunpodOptions): Provider {
  throw new Error("runpod adapter: not built yet");
}
