import type { Provider } from "./types";

export interface VramfarmOptions { apiKey: string; baseUrl: string; fetch?: typeof fetch }
export function createVramfarmProvider(_options: VramfarmOptions): Provider {
  throw new Error("vramfarm adapter: not built yet");
}
