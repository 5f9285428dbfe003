/** Injectable clock: production uses Date.now, tests pass their own. */
export type Clock = () => number;
export const systemClock: Clock = () => Date.now();

export const iso = (ms: number): string => new Date(ms).toISOString();
export const ms = (isoTime: string): number => Date.parse(isoTime);
