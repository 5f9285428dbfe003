import type { KeeperPort } from "../keeper/client";
import type { StopReason } from "../leases/schema";

/**
 * Asks a lease's keeper to stop it. A keeper that never got its start() (the worker died
 * between writing the row and waking the keeper) does not know its lease and refuses: it is
 * started first and asked again, so no active lease is left without a keeper.
 */
export async function stopViaKeeper(
  keepers: KeeperPort,
  leaseId: string,
  reason: StopReason,
  detail: string,
): Promise<{ already: boolean }> {
  try {
    const result = await keepers.stop(leaseId, reason, detail);
    return { already: result.already };
  } catch {
    // The port takes a new stub for every call, so the retry does not reuse a broken one.
    await keepers.start(leaseId);
    const result = await keepers.stop(leaseId, reason, detail);
    return { already: result.already };
  }
}

/** Runs `work` over `items`, at most `limit` at a time (6 connections per invocation). */
export async function mapLimit<T, R>(items: readonly T[], limit: number, work: (item: T) => Promise<R>): Promise<R[]> {
  const results: R[] = new Array(items.length);
  let next = 0;
  const workers = Array.from({ length: Math.min(limit, items.length) }, async () => {
    while (next < items.length) {
      const index = next++;
      results[index] = await work(items[index]!);
    }
  });
  await Promise.all(workers);
  return results;
}
