/** Injectable clock: production uses Date.now, tests pass their own. */
export type Clock = () => number;
export const systemClock: Clock = () => Date.now();

export const iso = (ms: number): string => new Date(ms).toISOString();
export const ms = (isoTime: string): number => Date.parse(isoTime);

/** Injectable wait: production uses setTimeout, tests pass one that resolves at once or advances a fake clock. */
export type Sleep = (ms: number) => Promise<void>;
export const systemSleep: Sleep = (waitMs) => new Promise<void>((resolve) => setTimeout(resolve, waitMs));
