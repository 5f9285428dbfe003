import type { ModelMachine } from "../../src/sim/model";
import { type FakeService, installFakes } from "../fakes/install";
import { RunpodFake } from "../fakes/runpod";
import { VastFake } from "../fakes/vast";
import { VramfarmFake } from "../fakes/vramfarm";
import { classify, Faulty, type FaultyProvider } from "../robustness/faulty";

/*
 * The world of one multi-create cell: the three wire-faithful fakes, each behind a listing lag
 * (Lagging) and a fault switchboard (Faulty), a log of every create that reached a fake, and
 * what the fakes billed for every machine they ever made.
 */

export interface SentCreate {
  provider: FaultyProvider;
  /** the machines this create made at the fake (one; none if it was refused) */
  machines: string[];
  /** the moment the listing first shows them */
  visibleAt: number;
}

export interface World {
  runpod: RunpodFake;
  vast: VastFake;
  vramfarm: VramfarmFake;
  faulty: Record<FaultyProvider, Faulty>;
  /** every create that reached a fake, in order */
  creates: SentCreate[];
  restore(): void;
}

export const PROVIDERS: readonly FaultyProvider[] = ["runpod", "vast", "vramfarm"];

/**
 * Shows each new machine in its provider's listing only `lagFor(n)` ms after the create that
 * made it, n being that create's place among all creates of the rental. RunPod's lag is its own
 * (docs/providers.md#runpod-ambiguous-create: created pods may be missing from listings for a
 * while; the fake keeps `listedAt` per pod). Vast.ai and VRAMfarm document no lag: there the
 * listing is filtered here, the nearest of an eventually consistent listing and a create that
 * lands late. Status reads by id are never delayed.
 */
class Lagging implements FakeService {
  private readonly hiddenUntil = new Map<string, number>();

  constructor(
    private readonly provider: FaultyProvider,
    private readonly inner: RunpodFake | VastFake | VramfarmFake,
    private readonly creates: SentCreate[],
    private readonly lagFor: (n: number) => number,
  ) {}

  handles(url: URL): boolean {
    return this.inner.handles(url);
  }

  async handle(request: Request): Promise<Response> {
    const call = await classify(this.provider, request.clone());
    if (call === "rent") return this.create(request);
    if (call === "listing" && this.provider !== "runpod") return this.lagged(await this.inner.handle(request));
    return this.inner.handle(request);
  }

  private async create(request: Request): Promise<Response> {
    const model = this.inner.model;
    const before = new Set(model.machines.keys());
    const response = await this.inner.handle(request);
    const now = Date.now();
    const visibleAt = now + this.lagFor(this.creates.length);
    const made = [...model.machines.keys()].filter((id) => !before.has(id));
    for (const id of made) {
      if (this.provider === "runpod") model.get(id)!.meta.listedAt = visibleAt;
      else this.hiddenUntil.set(id, visibleAt);
    }
    this.creates.push({ provider: this.provider, machines: made, visibleAt });
    return response;
  }

  /** Vast (`/api/v1/instances/`) and VRAMfarm (`/instances`) both list under `instances`. */
  private async lagged(response: Response): Promise<Response> {
    if (response.status !== 200 || this.hiddenUntil.size === 0) return response;
    const body = (await response.json()) as { instances?: { id: number | string }[] | null };
    if (Array.isArray(body.instances)) {
      const now = Date.now();
      const shown = body.instances.filter((i) => (this.hiddenUntil.get(String(i.id)) ?? 0) <= now);
      // Vast answers an empty page as null (its fake's default quirk).
      body.instances = shown.length === 0 && this.provider === "vast" ? null : shown;
    }
    return new Response(JSON.stringify(body), { status: response.status, headers: response.headers });
  }
}

/** Fresh fakes (30 s boot, 5 s linger where the provider lingers), installed for this isolate. */
export function makeWorld(lagFor: (n: number) => number): World {
  const runpod = new RunpodFake({ quirks: { bootMs: 30_000, lingerMs: 5_000 } });
  const vast = new VastFake({ bootMs: 30_000, lingerMs: 5_000 });
  const vramfarm = new VramfarmFake({ bootMs: 30_000 });
  const creates: SentCreate[] = [];
  const faulty = {
    runpod: new Faulty("runpod", new Lagging("runpod", runpod, creates, lagFor)),
    vast: new Faulty("vast", new Lagging("vast", vast, creates, lagFor)),
    vramfarm: new Faulty("vramfarm", new Lagging("vramfarm", vramfarm, creates, lagFor)),
  };
  const installed = installFakes(faulty.runpod, faulty.vast, faulty.vramfarm);
  return { runpod, vast, vramfarm, faulty, creates, restore: () => installed.restore() };
}

// ------------------------------------------------------------------ catalogues

const RUNPOD_4090 = "NVIDIA GeForce RTX 4090";

/**
 * Two RTX 4090 offers at one provider, so a rental that gives up on the first moves to the
 * second: RunPod's community then secure cloud (0.34, 0.69 USD), Vast's 1× then a 2× ask (added
 * here: the default catalogue has one verified 4090), VRAMfarm's 1× then 2× (0.45, 0.96 EUR).
 */
export function twoOffersAt(w: World, provider: FaultyProvider): void {
  if (provider !== "vast") return;
  const one = w.vast.offers.find((o) => o.id === 18463529)!;
  w.vast.offers.push({
    ...one,
    id: 18463540,
    ask_contract_id: 18463540,
    machine_id: 30540,
    num_gpus: 2,
    gpu_total_ram: one.gpu_ram * 2,
    dph_base: 0.7,
  });
}

/**
 * Exactly one RTX 4090 offer at `provider`, ranked `first` or second against the other
 * provider's: RunPod keeps its community cloud (0.34 USD) to rank first and its secure cloud
 * (0.69 USD) to rank second; Vast's one verified 4090 (0.36 USD) ranks above VRAMfarm's and
 * below RunPod community's; VRAMfarm keeps its 1× (0.45 EUR = 0.49 USD).
 */
export function oneOfferAt(w: World, provider: FaultyProvider, first: boolean): void {
  if (provider === "runpod") {
    const type = w.runpod.gpuTypes.find((t) => t.id === RUNPOD_4090)!;
    if (first) Object.assign(type, { securePrice: null, secureCloud: false });
    else Object.assign(type, { communityPrice: null, communityCloud: false });
  }
  if (provider === "vramfarm") {
    for (const listing of w.vramfarm.listings) if (listing.count > 1) listing.free = 0;
  }
}

// ------------------------------------------------------------------ billing

const HOUR_MS = 3_600_000;

/** When the fake first reads the machine gone: an accepted terminate plus its linger; null while it lives. */
function goneAt(m: ModelMachine): number | null {
  return m.terminateRequestedAt === null ? null : m.terminateRequestedAt + m.lingerMs;
}

/**
 * What a fake billed for one machine, in USD. RunPod and Vast.ai bill from the accepted create
 * (the image pull included) until the terminate (RunPod) or until the machine is gone (Vast.ai), at its own price (Vast's dph_total holds
 * the disk); VRAMfarm bills its own `cost_eur`: per started minute from running, at least 15
 * minutes, provisioning free.
 */
function billedUsd(w: World, provider: FaultyProvider, m: ModelMachine, now: number, eurUsd: number): number {
  if (provider === "vramfarm") return w.vramfarm.costEur(m) * eurUsd;
  // RunPod stops billing at the accepted terminate: its pod then reads TERMINATED with `cost`
  // 0.0 while it lingers (the fake's own /v2/billing/pods bills the same way).
  const until = provider === "runpod" ? (m.terminateRequestedAt ?? now) : (goneAt(m) ?? now);
  return (m.pricePerHour * Math.max(0, until - m.createdAt)) / HOUR_MS;
}

/** Every machine any fake ever made (gone ones too), with what it billed. */
export function everyMachine(
  w: World,
  now: number,
  eurUsd: number,
): { provider: FaultyProvider; machine: ModelMachine; alive: boolean; billedUsd: number }[] {
  return PROVIDERS.flatMap((provider) => {
    const model = w[provider].model;
    return [...model.machines.values()].map((machine) => ({
      provider,
      machine,
      alive: model.state(machine.id) !== "gone",
      billedUsd: billedUsd(w, provider, machine, now, eurUsd),
    }));
  });
}
