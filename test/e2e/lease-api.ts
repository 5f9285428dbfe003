import type { EventSourceMessage } from "eventsource-parser";
import { EventSourceParserStream } from "eventsource-parser/stream";
import { expect } from "vitest";

export interface LeaseEvent {
  seq: number;
  kind: string;
  detail: string | null;
}

/** What every suite reads of a lease; a suite widens it with the fields it checks. */
export interface LeaseBase {
  id: string;
  status: string;
  provider_ref: string | null;
  teardown_verified_at: string | null;
}

/** The API of one local worker as its admin sees it: plain fetch, the lease's event stream, stop. */
export function leaseApi<L extends LeaseBase>(base: string, adminToken: string) {
  const auth = { Authorization: `Bearer ${adminToken}` };

  async function api<T>(path: string, init: RequestInit = {}): Promise<{ status: number; body: T }> {
    const res = await fetch(`${base}${path}`, {
      ...init,
      headers: { ...auth, "Content-Type": "application/json", ...init.headers },
    });
    return { status: res.status, body: (await res.json()) as T };
  }

  const getLease = async (id: string) => (await api<L>(`/v1/leases/${id}`)).body;

  /**
   * Reads the lease's event stream (Server-Sent Events) after event `after` until an event of
   * `kind` (or `stopped`) arrives; reconnects with Last-Event-ID, as an EventSource does, when the
   * worker ends the stream first or the connection drops (a reused keep-alive socket the local
   * server has just closed: ECONNRESET).
   */
  async function eventsUntil(id: string, kind: string, after = 0, timeoutMs = 90_000): Promise<LeaseEvent[]> {
    const seen: LeaseEvent[] = [];
    const signal = AbortSignal.timeout(timeoutMs);
    let last = after;
    for (;;) {
      let res: Response;
      try {
        res = await fetch(`${base}/v1/leases/${id}/events`, {
          headers: { ...auth, Accept: "text/event-stream", ...(last ? { "Last-Event-ID": String(last) } : {}) },
          signal,
        });
      } catch (error) {
        if (signal.aborted || !dropped(error)) throw error;
        continue;
      }
      expect(res.status).toBe(200);
      const reader = (res.body as ReadableStream<BufferSource>)
        .pipeThrough(new TextDecoderStream())
        .pipeThrough(new EventSourceParserStream())
        .getReader();
      try {
        for (;;) {
          let next: ReadableStreamReadResult<EventSourceMessage>;
          try {
            next = await reader.read();
          } catch (error) {
            if (signal.aborted || !dropped(error)) throw error;
            break;
          }
          const { done, value } = next;
          if (done) break;
          const event = JSON.parse(value.data) as LeaseEvent;
          last = event.seq;
          seen.push(event);
          if (event.kind === kind || event.kind === "stopped") return seen;
        }
      } finally {
        await reader.cancel().catch(() => undefined);
      }
    }
  }

  /** Stops the lease and follows it to `stopped`: the machine's teardown verified. */
  async function stopAndVerify(id: string, after: number): Promise<L> {
    const stop = await api<{ ok: boolean }>(`/v1/leases/${id}/stop`, { method: "POST" });
    expect(stop).toMatchObject({ status: 200, body: { ok: true } });
    const events = await eventsUntil(id, "stopped", after);
    expect(events.at(-1)?.kind).toBe("stopped");
    const stopped = await getLease(id);
    expect(stopped.status).toBe("stopped");
    expect(stopped.teardown_verified_at).not.toBeNull();
    return stopped;
  }

  /** Quick sim boots; the default download speed (250 MB/s) takes 1.3 GB of weights about 5 s. */
  async function quickModelBoots(): Promise<void> {
    const config = await api("/v1/sim/config", {
      method: "PUT",
      body: JSON.stringify({ boot_seconds: 2, ready_seconds: 1, linger_seconds: 1, download_mbs: 250 }),
    });
    expect(config.status).toBe(200);
  }

  /** Rents a sim model lease for at most 5 minutes; the 202 answer as sent. */
  async function rentModel(model: string): Promise<L & { inference_key?: string }> {
    const rented = await api<L & { inference_key?: string }>("/v1/leases", {
      method: "POST",
      body: JSON.stringify({ provider: "sim", model, max_minutes: 5 }),
    });
    expect(rented.status).toBe(202);
    return rented.body;
  }

  return { api, getLease, eventsUntil, stopAndVerify, quickModelBoots, rentModel };
}

/** A connection the other end reset: the request is sent again, as a browser's EventSource would. */
function dropped(error: unknown): boolean {
  const cause = error instanceof Error ? (error.cause as { code?: string } | undefined) : undefined;
  return cause?.code === "ECONNRESET" || (error as { code?: string })?.code === "ECONNRESET";
}
