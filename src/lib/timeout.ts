/**
 * Races `work` against a timer and rejects with `onTimeout()` when the timer wins: for calls
 * that carry no AbortSignal of ours (a provider listing, an RPC, a whole adapter call).
 */
export async function withTimeout<T>(work: () => Promise<T>, timeoutMs: number, onTimeout: () => Error): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(onTimeout()), timeoutMs);
  });
  try {
    return await Promise.race([Promise.resolve().then(work), timeout]);
  } finally {
    if (timer !== undefined) clearTimeout(timer);
  }
}
