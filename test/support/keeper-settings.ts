import type { KeeperSettings } from "../../src/keeper/decide";

/** The keeper's settings at the defaults (src/config.ts), for the pure decision suites. */
export const keeperTestSettings: KeeperSettings = {
  pollIntervalMs: 10_000,
  verifyIntervalMs: 5_000,
  reterminateIntervalMs: 30_000,
  startTimeoutMs: 20 * 60_000,
  unverifiedAfterMs: 10 * 60_000,
  slowVerifyMs: 60_000,
  beatMs: 60_000,
  rentWindowMs: 120_000,
  eurUsd: 1.08,
  startTimeoutMin: 20,
};
