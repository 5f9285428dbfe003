import { keeperFor } from "../keeper/client";
import type { StopReason } from "../leases/schema";

/**
 * Asks a lease's keeper to stop it. A keeper that never got its start() (the worker died
 * between writing the row and waking the keeper) does not know its lease and refuses: it is
 * started first and asked again, so no active lease is left without a keeper.
 */
export async function stopViaKeeper(
  env: Env,
  leaseId: string,
  reason: StopReason,
  detail: string,
): Promise<{ already: boolean }> {
  try {
    const result = await keeperFor(env, leaseId).stop(reason, detail);
    return { already: result.already };
  } catch {
    // A stub that threw is broken: a new one for the retry.
    await keeperFor(env, leaseId).start(leaseId);
    const result = await keeperFor(env, leaseId).stop(reason, detail);
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
