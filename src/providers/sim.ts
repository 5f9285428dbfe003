import type { Clock } from "../lib/time";
import type { ModelLibrary } from "../models/facts";
import { type SimCloud, type SimMachineView, type SimRead, type SimStock, simCloud } from "../sim/cloud";
import { ProviderError, type ProviderErrorKind } from "./http";
import { OLLAMA_PORT } from "./ollama";
import type {
  MachineSpec,
  MachineStatus,
  OfferQuery,
  OllamaProbe,
  OwnMachine,
  Provider,
  ProviderOffer,
  RentResult,
} from "./types";

export interface SimOptions {
  namespace: DurableObjectNamespace;
  /**
   * Kept for symmetry with the other adapters; the sim's machines live on the Durable Object's
   * own Date.now, so every caller sees the same machine states whatever clock it was given.
   */
  clock: Clock;
  /** where the worker answers (PUBLIC_URL): a machine's Ollama is served at `<this>/sim/ollama/<ref>` */
  publicUrl?: string | null;
  /** the sim's model library, when its machines pull from it (SIM_MODELS=library) */
  modelLibrary?: ModelLibrary;
}

/** The worker's own address when PUBLIC_URL is not set: `npm start` (wrangler dev) listens here. */
const LOCAL_ORIGIN = "http://localhost:8787";

const OFFER_ID = /^sim:([a-z0-9-]+):(\d+)$/;

/** The simulated cloud behind the Provider interface; it talks to the one SimCloud object over RPC. */
export function createSimProvider(options: SimOptions): Provider {
  const cloud = () => simCloud(options.namespace);
  const origin = (options.publicUrl ?? LOCAL_ORIGIN).replace(/\/+$/, "");

  /** An RPC that failed in transport (the object threw or was reset) is a ProviderError. */
  async function call<T>(
    what: string,
    kind: ProviderErrorKind,
    fn: (stub: DurableObjectStub<SimCloud>) => Promise<T>,
  ): Promise<T> {
    try {
      return await fn(cloud());
    } catch (cause) {
      throw new ProviderError("sim", kind, `${what}: ${cause instanceof Error ? cause.message : String(cause)}`);
    }
  }

  /** A read the sim's faults can fail: `ok: false` becomes a ProviderError, never an empty result. */
  async function read<T>(what: string, fn: (stub: DurableObjectStub<SimCloud>) => Promise<SimRead<T>>): Promise<T> {
    const answer = (await call(what, "network", fn)) as SimRead<T>;
    if (!answer.ok) throw new ProviderError("sim", "api", `${what}: ${answer.error}`);
    return answer.value;
  }

  const listing = () => read<SimMachineView[]>("list machines", (s) => s.list() as Promise<SimRead<SimMachineView[]>>);

  return {
    name: "sim",
    modelLibrary: options.modelLibrary,
    currency: "USD",
    labelled: true,
    billingStartsAt: "accepted",
    minimumBilledMinutes: 0,

    async listOffers(query) {
      const stock = (await call("list offers", "network", (s) => s.offers())) as SimStock[];
      return simOffers(stock, query);
    },

    async rent(offer, spec) {
      const match = OFFER_ID.exec(offer.offer_id);
      if (!match) return { ok: false, kind: "rejected", error: `not a sim offer: ${offer.offer_id}` };
      let answer: Awaited<ReturnType<ReturnType<typeof cloud>["create"]>>;
      try {
        answer = await cloud().create({
          gpu: match[1]!,
          gpu_count: Number(match[2]),
          label: spec.label,
          template: spec.template,
          image: spec.image,
          ports: portsFor(spec),
          env: envFor(spec),
          origin: workerOrigin(spec),
        });
      } catch (cause) {
        // The call may have reached the object: a machine may exist. The caller looks it up by label.
        return {
          ok: false,
          kind: "ambiguous",
          error: `create: ${cause instanceof Error ? cause.message : String(cause)}`,
        };
      }
      return rentResult(answer);
    },

    async status(ref) {
      const machine = await read<SimMachineView | null>(
        "status",
        (s) => s.status(ref) as Promise<SimRead<SimMachineView | null>>,
      );
      return machine ? machineStatus(machine, machine.origin ?? origin) : GONE;
    },

    async terminate(ref) {
      // "ignored" is answered like "accepted" (the real clouds do the same); already gone is success.
      await call("terminate", "network", (s) => s.terminate(ref));
    },

    async findByLabel(label) {
      const found = (await listing()).find((m) => m.label === label);
      return found ? ownMachine(found) : null;
    },

    async listOwn(prefix) {
      return { machines: (await listing()).filter((m) => m.label?.startsWith(prefix)).map(ownMachine), next: null };
    },

    async balance() {
      const amount = (await call("balance", "network", (s) => s.balance())) as number;
      return { amount, currency: "USD" };
    },

    machineFetch: (request) => cloud().fetch(request),

    async ollamaProbe(ref, _status, model): Promise<OllamaProbe> {
      try {
        return (await cloud().ollamaProbe(ref, model)) as OllamaProbe;
      } catch {
        return { phase: "down" };
      }
    },
  };
}

/** The catalogue's in-stock machine sizes that match the query, as provider offers. */
export function simOffers(stock: SimStock[], query: OfferQuery): ProviderOffer[] {
  const gpuFilter = query.gpu?.trim().toLowerCase();
  const offers: ProviderOffer[] = [];
  for (const type of stock) {
    for (const count of type.counts) {
      // Like RunPod, only sizes that are in stock are offered.
      if (count > type.free) continue;
      const offer: ProviderOffer = {
        offer_id: `sim:${type.slug}:${count}`,
        provider: "sim",
        gpu: type.name,
        gpu_key: type.slug,
        gpu_count: count,
        vram_gb: type.vram_gb * count,
        price_per_hour: round(type.price_per_gpu_hour * count, 4),
        currency: "USD",
        cloud: "sim",
        availability: type.free >= 2 * count ? "high" : "low",
        location: "sim-local",
        bandwidth_gbs: null,
        download_mbs: type.download_mbs,
        download_cost_per_gb: 0,
        min_billed_minutes: 0,
        templates: ["ollama", "custom"],
      };
      if (query.vram_gb !== undefined && offer.vram_gb < query.vram_gb) continue;
      if (query.gpu_count !== undefined && count !== query.gpu_count) continue;
      if (query.max_price_usd !== undefined && offer.price_per_hour > query.max_price_usd) continue;
      if (gpuFilter && !type.name.toLowerCase().includes(gpuFilter) && !type.slug.includes(gpuFilter)) continue;
      offers.push(offer);
    }
  }
  return offers;
}

/**
 * Where the worker that rents the machine answers: the origin of the lease's call-back (PUBLIC_URL,
 * else the origin of the request or of the schedule's last request). The machine's ports are served
 * there, so a worker on another port than 8787 hands out its own addresses.
 */
function workerOrigin(spec: MachineSpec): string | null {
  const base = spec.env.GPULEASE_CALLBACK_URL?.replace(/\/v1\/leases\/[^/]+\/done$/, "");
  return base && /^https?:\/\/[^/]/.test(base) && URL.canParse(base) ? base : null;
}

function portsFor(spec: MachineSpec): number[] {
  if (spec.ports.length > 0) return spec.ports;
  return spec.template === "ollama" ? [OLLAMA_PORT] : [];
}

/** As RunPod and Vast.ai set it for the Ollama template: the model stays loaded, with the lease's context. */
function envFor(spec: MachineSpec): Record<string, string> {
  if (spec.template !== "ollama") return { ...spec.env };
  return {
    OLLAMA_KEEP_ALIVE: "-1",
    ...spec.env,
    ...(spec.context_length ? { OLLAMA_CONTEXT_LENGTH: String(spec.context_length) } : {}),
  };
}

function rentResult(answer: Awaited<ReturnType<SimCloud["create"]>>): RentResult {
  if (answer.ok) return { ok: true, ref: answer.machine.ref, price_per_hour: answer.machine.price_per_hour };
  switch (answer.kind) {
    case "no_capacity":
    case "rejected":
      return { ok: false, kind: answer.kind, error: answer.error };
    case "error_but_created":
      // The sim's error carries no id, like a create that timed out: only the label finds the machine.
      return { ok: false, kind: "ambiguous", error: answer.error };
  }
}

const GONE: MachineStatus = {
  state: "gone",
  access: null,
  cost: null,
  traffic_cost: null,
  price_per_hour: null,
  error: null,
};

function machineStatus(machine: SimMachineView, origin: string): MachineStatus {
  return {
    state: machine.shown,
    // The worker serves each machine's Ollama (src/sim/ollama-routes.ts); other ports have nothing behind them.
    access:
      machine.shown === "running"
        ? { urls: machine.ports.map((port) => simPortUrl(origin, machine.ref, port)), ssh: null }
        : null,
    // Billed from creation, like RunPod and Vast.ai.
    cost: round(machine.cost_usd, 4),
    traffic_cost: null,
    price_per_hour: machine.price_per_hour,
    error: machine.error,
  };
}

/** Where a client reaches a port of a sim machine: the worker's own routes. */
function simPortUrl(origin: string, ref: string, port: number): string {
  return port === OLLAMA_PORT ? `${origin}/sim/ollama/${ref}` : `${origin}/sim/ports/${ref}/${port}`;
}

function ownMachine(machine: SimMachineView): OwnMachine {
  return {
    ref: machine.ref,
    label: machine.label,
    state: machine.shown,
    created_at: new Date(machine.created_at).toISOString(),
    price_per_hour: machine.price_per_hour,
  };
}

function round(value: number, digits: number): number {
  const f = 10 ** digits;
  return Math.round(value * f) / f;
}
