/**
 * Items held in this isolate per key until the next request for that key makes its one call
 * anyway (to a lease's keeper, an endpoint's object): they ride on that call, so a busy key costs
 * one call per request. An item no request picks up within the hold is sent on its own; each item
 * leaves the hold exactly once.
 */
export class Hold<T> {
  readonly #held = new Map<string, T[]>();

  /** @param maxHeld more than this many waiting for one key: sent at once rather than held on */
  constructor(private readonly maxHeld = 500) {}

  /** The items waiting for `key`, taken out of the hold (the caller sends them). */
  take(key: string): T[] {
    const items = this.#held.get(key);
    if (!items) return [];
    this.#held.delete(key);
    return items;
  }

  /**
   * Holds one item for `holdMs` (0: sends it at once); `send` hands items on. The wait runs in
   * `ctx.waitUntil`, after the answer has gone.
   */
  add(
    key: string,
    item: T,
    holdMs: number,
    ctx: { waitUntil(promise: Promise<unknown>): void },
    send: (items: T[]) => Promise<unknown>,
  ): void {
    const items = this.#held.get(key) ?? [];
    items.push(item);
    this.#held.set(key, items);
    // Only an item's own wait sends it: a busy key's later items are left to the next request.
    const sendLeft = () => {
      if (!this.#held.get(key)?.includes(item)) return Promise.resolve();
      return send(this.take(key)).catch(() => undefined);
    };
    if (holdMs === 0 || items.length >= this.maxHeld) {
      ctx.waitUntil(sendLeft());
      return;
    }
    ctx.waitUntil(new Promise((resolve) => setTimeout(resolve, holdMs)).then(sendLeft));
  }
}
