import { createExecutionContext, runInDurableObject, waitOnExecutionContext } from "cloudflare:test";
import { env } from "cloudflare:workers";
import worker from "../../src/index";
import type { MeterState } from "../../src/keeper/meter";
import type { Lease } from "../../src/leases/schema";
import type { FakeService } from "../fakes/install";
import { apiRequest } from "../helpers";
import type { TestClock } from "./clock";
import { driveTo, keeperOf } from "./keeper";
import { rent } from "./lease";

/**
 * A RunPod machine's Ollama gone hostile: once `answer` is set, every request the gateway sends to
 * the pod's proxy (`{pod}-11434.proxy.runpod.fake`) gets what it returns; until then the RunPod
 * fake behind it answers (the keeper's probes while the lease comes up). Install it before the
 * RunPod fake: installFakes asks the services in order.
 */
export class HostileMachine implements FakeService {
  answer: ((request: Request) => Response | Promise<Response>) | null = null;
  /** requests the hostile answer got */
  seen = 0;

  handles(url: URL): boolean {
    return this.answer !== null && /-11434\.proxy\.runpod\.fake$/.test(url.hostname);
  }

  async handle(request: Request): Promise<Response> {
    this.seen++;
    return (this.answer as (request: Request) => Response | Promise<Response>)(request);
  }
}

/** A RunPod model lease driven to running; its inference key. */
export async function runningRunpodModel(clock: TestClock, model: string): Promise<{ id: string; key: string }> {
  const res = await rent({ provider: "runpod", gpu: "4090", model, max_minutes: 30 });
  const text = await res.text();
  if (res.status !== 202) throw new Error(`rent: ${res.status} ${text}`);
  const lease = JSON.parse(text) as Lease & { inference_key: string };
  await driveTo(lease.id, "running", { clock, maxAlarms: 200 });
  return { id: lease.id, key: lease.inference_key };
}

/** One gateway request through the worker's fetch handler, its body read to the end (or its error), usage settled. */
export async function throughGateway(
  leaseId: string,
  key: string,
  path: string,
  json?: unknown,
): Promise<{ res: Response; bytes: Uint8Array | null; readError: unknown }> {
  const request = apiRequest(`/llm/${leaseId}/${path}`, {
    method: json === undefined ? "GET" : "POST",
    json,
    token: key,
  });
  const ctx = createExecutionContext();
  const res = await worker.fetch(request as Request<unknown, IncomingRequestCfProperties>, env, ctx);
  let bytes: Uint8Array | null = null;
  let readError: unknown = null;
  try {
    bytes = new Uint8Array(await res.arrayBuffer());
  } catch (error) {
    readError = error;
  }
  await waitOnExecutionContext(ctx);
  return { res, bytes, readError };
}

/** The lease keeper's meter as it stands (its Durable Object storage). */
export async function meterOf(leaseId: string): Promise<MeterState | null> {
  return runInDurableObject(keeperOf(leaseId), async (_keeper, state) => (await state.storage.get("meter")) ?? null);
}
