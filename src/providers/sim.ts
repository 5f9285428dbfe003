import type { Clock } from "../lib/time";
import type { Provider } from "./types";

export interface SimOptions { namespace: DurableObjectNamespace; clock: Clock }
export function createSimProvider(_options: SimOptions): Provider {
  throw new Error("sim adapter: not built yet");
}
