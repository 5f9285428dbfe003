import { vi } from "vitest";

/**
 * One clock for the worker, its Durable Objects and the fakes (they all run in the test
 * isolate): Date is faked and only moved by the test. Start far in the future, so that workerd
 * never fires a keeper alarm on its own; the test fires them (test/support/keeper.ts).
 */
export class TestClock {
  now: number;
  constructor(start = Date.parse("2034-01-01T00:00:00Z")) {
    this.now = start;
  }
  /** Fakes Date (only Date: timers stay real) and sets it to this clock. */
  install(): void {
    vi.useFakeTimers({ toFake: ["Date"] });
    vi.setSystemTime(this.now);
  }
  set(t: number): void {
    this.now = t;
    vi.setSystemTime(t);
  }
  advance(ms: number): void {
    this.set(this.now + ms);
  }
}
