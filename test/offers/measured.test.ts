import { env } from "cloudflare:workers";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { overlayVars } from "../../src/config";
import { iso } from "../../src/lib/time";
import { clearOfferCache } from "../../src/offers/cache";
import {
  type BandwidthSample,
  bandwidthRejects,
  recordBandwidthSample,
  VENDOR_TOLERANCE,
} from "../../src/offers/measured";
import type { ProviderOffer } from "../../src/providers/types";
import { browse, signIn } from "../dashboard/support";
import { api } from "../helpers";
import { emptyTables } from "../support/fresh";
import { providerOffer } from "../support/provider-fixtures";
import { registryOf, type StubProvider, stubProvider, type TestWorld, world } from "./stub-providers";

interface ShownOffer {
  offer_id: string;
  bandwidth_gbs: number | null;
  measured_bandwidth_gbs: number | null;
  measured_samples: number;
  value: number | null;
}

const DAY = 86_400_000;
const START = Date.parse("2026-11-29T02:00:00Z");

const listed: ProviderOffer[] = [
  providerOffer({ offer_id: "runpod:SECURE:NVIDIA GeForce RTX 4090", provider: "runpod", cloud: "SECURE" }),
  providerOffer({
    offer_id: "runpod:SECURE:NVIDIA GeForce RTX 4090:2",
    provider: "runpod",
    cloud: "SECURE",
    gpu_count: 2,
    vram_gb: 48,
    price_per_hour: 1.38,
  }),
  providerOffer({ offer_id: "vast:9001", provider: "vast", bandwidth_gbs: 1000 }),
  providerOffer({ offer_id: "vast:9002", provider: "vast", bandwidth_gbs: 1000 }),
  providerOffer({ offer_id: "vast:9003", provider: "vast", gpu: "RTX 3090", gpu_key: "rtx-3090", price_per_hour: 0.2 }),
];

function offersWorld(): { w: TestWorld; runpod: StubProvider; vast: StubProvider } {
  const runpod = stubProvider("runpod", () => listed.filter((o) => o.provider === "runpod"));
  const vast = stubProvider("vast", () => listed.filter((o) => o.provider === "vast"));
  return { w: world(registryOf({ runpod, vast }), START), runpod, vast };
}

const record = (over: Partial<BandwidthSample> & Pick<BandwidthSample, "gbs">, at = START - DAY) =>
  recordBandwidthSample(env.DB, {
    provider: "runpod",
    gpu: "RTX 4090",
    gpu_count: 1,
    host: null,
    at: iso(at),
    ...over,
  });

async function offersOf(res: Response): Promise<Map<string, ShownOffer>> {
  expect(res.status).toBe(200);
  const body = (await res.json()) as { offers: ShownOffer[] };
  return new Map(body.offers.map((o) => [o.offer_id, o]));
}

const shown = (o: ShownOffer | undefined) => [o?.measured_bandwidth_gbs, o?.measured_samples, o?.value];

beforeEach(async () => {
  clearOfferCache();
  await env.OFFERS_CACHE.getByName("global").reset();
  await emptyTables(["bandwidth_samples"]);
});
afterEach(() => overlayVars({}));

describe("GET /v1/offers: measured bandwidth", () => {
  it("shows the 30-day median per card beside the vendor's figure and ranks by it from 3 samples", async () => {
    const { w } = offersWorld();
    let offers = await offersOf(await w.get("/v1/offers?provider=runpod"));
    // no weights: load 100 s, first hour 0.69 × 1.027778 = 0.709167
    expect(shown(offers.get("runpod:SECURE:NVIDIA GeForce RTX 4090"))).toEqual([null, 0, 1421]);

    await record({ gbs: 900 });
    await record({ gbs: 700 });
    offers = await offersOf(await w.get("/v1/offers?provider=runpod"));
    // two samples: shown (median 800), not ranked on
    expect(shown(offers.get("runpod:SECURE:NVIDIA GeForce RTX 4090"))).toEqual([800, 2, 1421]);

    // a 2-card lease that got 720 GB/s got 800 per card (the 10 % multi-GPU rule undone)
    await record({ gbs: 720, gpu_count: 2 });
    await record({ gbs: 1000 });
    offers = await offersOf(await w.get("/v1/offers?provider=runpod"));
    const one = offers.get("runpod:SECURE:NVIDIA GeForce RTX 4090");
    const two = offers.get("runpod:SECURE:NVIDIA GeForce RTX 4090:2");
    // per card 700, 800, 900, 1000: median 850
    expect(one?.bandwidth_gbs).toBe(1008);
    expect(shown(one)).toEqual([850, 4, 1199]); // 850 / 0.709167 = 1198.6
    expect(two?.bandwidth_gbs).toBe(907);
    // 850 × 0.9 = 765; first hour 1.38 × 1.027778 = 1.418333
    expect(shown(two)).toEqual([765, 4, 539]);
  });

  it("keeps the median of an odd count and of an even count, per provider and GPU", async () => {
    const { w } = offersWorld();
    for (const gbs of [300, 900, 600]) await record({ provider: "vast", gpu: "RTX 3090", host: "1", gbs });
    for (const gbs of [100, 200]) await record({ provider: "vast", gpu: "NVIDIA GeForce RTX 4090", host: "5", gbs });
    const offers = await offersOf(await w.get("/v1/offers?provider=vast"));
    expect(shown(offers.get("vast:9003"))).toEqual([600, 3, 2919]); // 600 / (0.2 × 1.027778)
    // the lease named the card with vendor words; it is the offers' "RTX 4090"
    expect(shown(offers.get("vast:9002"))).toEqual([150, 2, 1410]); // too few: the vendor's 1000
  });

  it("counts only the last 30 days of the request's clock and prunes what fell out when recording", async () => {
    const { w } = offersWorld();
    for (let i = 0; i < 3; i++) await record({ gbs: 100 }, START - 31 * DAY);
    await record({ gbs: 900 }, START - 29 * DAY);
    let offers = await offersOf(await w.get("/v1/offers?provider=runpod"));
    expect(shown(offers.get("runpod:SECURE:NVIDIA GeForce RTX 4090"))).toEqual([900, 1, 1421]);

    const rows = async () =>
      (await env.DB.prepare("SELECT COUNT(*) AS n FROM bandwidth_samples").first<{ n: number }>())?.n;
    expect(await rows()).toBe(4);
    w.now = START + 2 * DAY;
    await record({ gbs: 500 }, w.now);
    // everything older than 30 days at the new sample's time is gone, the 900 (now 31 days old) too
    expect(await rows()).toBe(1);
    offers = await offersOf(await w.get("/v1/offers?provider=runpod"));
    expect(shown(offers.get("runpod:SECURE:NVIDIA GeForce RTX 4090"))).toEqual([500, 1, 1421]);
  });

  it("uses a host's own samples when it has enough, else its GPU's (every host's)", async () => {
    const vast = { provider: "vast" as const };
    for (let i = 0; i < 3; i++) await record({ ...vast, host: "9001", gbs: 500 });
    for (let i = 0; i < 3; i++) await record({ ...vast, host: "7777", gbs: 1000 });
    let offers = await offersOf(await offersWorld().w.get("/v1/offers?provider=vast"));
    expect(shown(offers.get("vast:9001"))).toEqual([500, 3, 705]); // 500 / 0.709167
    expect(shown(offers.get("vast:9002"))).toEqual([750, 6, 1058]); // no samples of its own

    overlayVars({ MEASURED_MIN_SAMPLES: "4" });
    offers = await offersOf(await offersWorld().w.get("/v1/offers?provider=vast"));
    expect(shown(offers.get("vast:9001"))).toEqual([750, 6, 1058]); // 3 of its own are too few now
  });

  it("shows a sample recorded after the listing was cached in the next request", async () => {
    const { w, runpod } = offersWorld();
    let offers = await offersOf(await w.get("/v1/offers?provider=runpod"));
    expect(offers.get("runpod:SECURE:NVIDIA GeForce RTX 4090")?.measured_samples).toBe(0);
    for (let i = 0; i < 3; i++) await record({ gbs: 600 }, START);
    offers = await offersOf(await w.get("/v1/offers?provider=runpod"));
    expect(shown(offers.get("runpod:SECURE:NVIDIA GeForce RTX 4090"))).toEqual([600, 3, 846]);
    expect(runpod.calls).toHaveLength(1); // the second answer came from the cached listing
  });

  it("reads every offer's figures in one D1 query", async () => {
    for (const provider of ["runpod", "vast"] as const) await record({ provider, gbs: 800 });
    const { w } = offersWorld();
    const executed: string[] = [];
    w.services = { ...w.services, db: countingDb(env.DB, executed) };
    const offers = await offersOf(await w.get("/v1/offers"));
    expect(offers.size).toBe(listed.length);
    expect([...offers.values()].filter((o) => o.measured_samples > 0)).toHaveLength(4);
    expect(executed.filter((sql) => sql.includes("bandwidth_samples"))).toHaveLength(1);

    executed.length = 0;
    const types = await w.get("/v1/offer-types");
    expect(types.status).toBe(200);
    expect(executed.filter((sql) => sql.includes("bandwidth_samples"))).toHaveLength(1);
  });

  it("shows the figures on /v1/offer-types' cheapest offers", async () => {
    for (const gbs of [300, 900, 600]) await record({ provider: "vast", gpu: "RTX 3090", host: null, gbs });
    const res = await offersWorld().w.get("/v1/offer-types?provider=vast&gpu=3090");
    expect(res.status).toBe(200);
    const { types } = (await res.json()) as { types: { cheapest: ShownOffer }[] };
    expect(types.map((t) => shown(t.cheapest))).toEqual([[600, 3, 2919]]);
  });

  it("lays MEASURED_MIN_SAMPLES over the running worker and refuses a malformed one", async () => {
    // The sim's RTX 4090 at 0.69 USD: vendor 1008 GB/s
    for (const gbs of [500, 500]) await record({ provider: "sim", gbs }, Date.now() - DAY);
    const sim = async () =>
      (await offersOf(await api("/v1/offers?provider=sim&gpu=4090&gpu_count=1"))).get("sim:rtx-4090:1");
    expect(shown(await sim())).toEqual([500, 2, 1421]);
    overlayVars({ MEASURED_MIN_SAMPLES: "2" });
    expect(shown(await sim())).toEqual([500, 2, 705]);
    overlayVars({ MEASURED_MIN_SAMPLES: "0" });
    const health = await api("/health", { token: null });
    expect(health.status).toBe(503);
    expect(JSON.stringify(await health.json())).toContain("MEASURED_MIN_SAMPLES");
  });

  it("documents both fields in the OpenAPI schema", async () => {
    const doc = (await (await api("/openapi.json", { token: null })).json()) as {
      components: {
        schemas: Record<string, { properties: Record<string, { description?: string }>; required?: string[] }>;
      };
    };
    const offer = doc.components.schemas.Offer;
    expect(offer?.required).toEqual(expect.arrayContaining(["measured_bandwidth_gbs", "measured_samples"]));
    expect(offer?.properties.measured_bandwidth_gbs?.description).toContain("MEASURED_MIN_SAMPLES");
    expect(offer?.properties.measured_samples?.description).toContain("MEASURED_MIN_SAMPLES");
  });
});

describe("recordBandwidthSample", () => {
  it("keeps one sample per lease: a later flush replaces the earlier figure", async () => {
    expect(await record({ gbs: 500, lease_id: "lse_a" })).toBe(true);
    expect(await record({ gbs: 900, lease_id: "lse_a" })).toBe(true);
    await record({ gbs: 700, lease_id: "lse_b" });
    const offers = await offersOf(await offersWorld().w.get("/v1/offers?provider=runpod"));
    expect(shown(offers.get("runpod:SECURE:NVIDIA GeForce RTX 4090")).slice(0, 2)).toEqual([800, 2]);
  });

  it("a figure beyond the card's vendor bandwidth × the tolerance is dropped and counted, with the lease's earlier sample", async () => {
    // RTX 4090: 1008 GB/s by its vendor.
    expect(await record({ gbs: 900, lease_id: "lse_x" })).toBe(true);
    expect(await record({ gbs: 1008 * VENDOR_TOLERANCE + 1, lease_id: "lse_x" })).toBe(false);
    // Two cards decode one after the other: the per-card figure (÷ 0.9 for the second card) is checked.
    expect(await record({ gbs: 1008 * 0.9, gpu_count: 2, lease_id: "lse_y" })).toBe(true);
    expect(await record({ gbs: 1008 * 1.2, gpu_count: 2, lease_id: "lse_z" })).toBe(false);
    expect(await bandwidthRejects(env.DB)).toEqual({ above_vendor_bandwidth: 2 });
    const offers = await offersOf(await offersWorld().w.get("/v1/offers?provider=runpod"));
    expect(offers.get("runpod:SECURE:NVIDIA GeForce RTX 4090")?.measured_samples).toBe(1);
  });

  it("records nothing for a lease that decoded nothing", async () => {
    for (const gbs of [0, -1, Number.NaN, Number.POSITIVE_INFINITY]) expect(await record({ gbs })).toBe(false);
    const offers = await offersOf(await offersWorld().w.get("/v1/offers?provider=runpod"));
    expect(offers.get("runpod:SECURE:NVIDIA GeForce RTX 4090")?.measured_samples).toBe(0);
  });
});

describe("dashboard offers page", () => {
  it("shows the vendor's bandwidth and the measured one with its sample count", async () => {
    for (const gbs of [940, 950, 960]) await record({ provider: "sim", gbs }, Date.now() - DAY);
    const { cookie } = await signIn();
    const html = await (await browse("/offers?provider=sim&gpu=4090", { cookie })).text();
    const row = html.slice(html.indexOf('data-offer-id="sim:rtx-4090:1"'));
    const cells = row.slice(0, row.indexOf("</tr>"));
    expect(cells).toContain("1,008 GB/s");
    expect(cells).toMatch(/950 GB\/s<span class="muted small"> \(3 leases\)/);
    expect(html).toContain("Vendor bandwidth");
  });
});

/** env.DB with every executed statement's SQL written to `executed` (batches: each of theirs). */
function countingDb(db: D1Database, executed: string[]): D1Database {
  const sqlOf = new WeakMap<D1PreparedStatement, string>();
  const realOf = new WeakMap<D1PreparedStatement, D1PreparedStatement>();
  const wrap = (statement: D1PreparedStatement, sql: string): D1PreparedStatement => {
    const wrapped = new Proxy(statement, {
      get(target, prop) {
        const value = Reflect.get(target, prop, target);
        if (typeof value !== "function") return value;
        if (prop === "bind") return (...args: unknown[]) => wrap(target.bind(...args), sql);
        if (prop === "all" || prop === "first" || prop === "run" || prop === "raw")
          return (...args: unknown[]) => {
            executed.push(sql);
            return (value as (...a: unknown[]) => unknown).apply(target, args);
          };
        return value.bind(target);
      },
    });
    sqlOf.set(wrapped, sql);
    realOf.set(wrapped, statement);
    return wrapped;
  };
  return new Proxy(db, {
    get(target, prop) {
      if (prop === "prepare") return (sql: string) => wrap(target.prepare(sql), sql);
      if (prop === "batch")
        return (statements: D1PreparedStatement[]) => {
          for (const s of statements) executed.push(sqlOf.get(s) ?? "?");
          return target.batch(statements.map((s) => realOf.get(s) ?? s));
        };
      const value = Reflect.get(target, prop, target);
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
}
