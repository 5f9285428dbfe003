import { z } from "zod";
import { gpuSpecFor } from "./gpus";
import type { MachineSpec, MachineState, OfferQuery, ProviderOffer } from "./types";

/**
 * VRAMfarm's wire shapes as docs/providers.md#vramfarm fixes them, and the
 * pure mapping to gpulease's types. Extra fields are ignored.
 */

/** Billing runs per minute from `running`, at least 15 minutes per start. */
export const MIN_BILLED_MINUTES = 15;
/** The article's limit for `cmd`. */
export const MAX_CMD_CHARS = 4000;

export const VramfarmOfferSchema = z.object({
  gpu: z.string(),
  gpu_name: z.string().nullable().optional(),
  count: z.number().int().positive(),
  vram_total_gb: z.number().nonnegative(),
  /** EUR per hour for the whole machine, all cards */
  price: z.number().nonnegative(),
  country: z.string().nullable().optional(),
  traffic: z.object({ eur_per_gb: z.number().nonnegative() }).nullable().optional(),
});
export type VramfarmOffer = z.infer<typeof VramfarmOfferSchema>;

export const OffersResponseSchema = z.object({ offers: z.array(z.unknown()) });

/**
 * One gpulease offer per (gpu, count): renting names only the card and count and VRAMfarm takes
 * its cheapest free machine, so the cheapest listing is the price a rent will get.
 */
export function toOffers(listed: VramfarmOffer[], query: OfferQuery, eurUsd: number): ProviderOffer[] {
  const cheapest = new Map<string, VramfarmOffer>();
  for (const offer of listed) {
    if (!matches(offer, query, eurUsd)) continue;
    const key = `${offer.gpu}:${offer.count}`;
    const known = cheapest.get(key);
    if (!known || offer.price < known.price) cheapest.set(key, offer);
  }
  return [...cheapest.values()].map((offer) => ({
    offer_id: `vramfarm:${offer.gpu}:${offer.count}`,
    provider: "vramfarm",
    gpu: offer.gpu_name ?? offer.gpu,
    gpu_key: gpuSpecFor("vramfarm", offer.gpu)?.key ?? null,
    gpu_count: offer.count,
    vram_gb: offer.vram_total_gb,
    price_per_hour: offer.price,
    currency: "EUR",
    cloud: null,
    availability: "available",
    location: offer.country ?? null,
    bandwidth_gbs: null,
    download_mbs: null,
    // The included traffic is ignored: an estimate that assumes it is used up errs on the safe side.
    download_cost_per_gb: offer.traffic?.eur_per_gb ?? 0,
    min_billed_minutes: MIN_BILLED_MINUTES,
    // No HTTP port of the machine is published (SSH only): an Ollama lease could never be checked.
    templates: ["custom"],
  }));
}

function matches(offer: VramfarmOffer, query: OfferQuery, eurUsd: number): boolean {
  if (query.template === "ollama") return false;
  if (query.gpu) {
    const wanted = query.gpu.toLowerCase();
    if (!offer.gpu.toLowerCase().includes(wanted) && !(offer.gpu_name ?? "").toLowerCase().includes(wanted))
      return false;
  }
  if (query.gpu_count !== undefined && offer.count !== query.gpu_count) return false;
  if (query.vram_gb !== undefined && offer.vram_total_gb < query.vram_gb) return false;
  // Prices are EUR; the cap is USD.
  if (query.max_price_usd !== undefined && offer.price * eurUsd > query.max_price_usd) return false;
  return true;
}

/** `gpu` is sent only when it names a VRAMfarm slug; a display-name fragment ("4090") is filtered here. */
export function offersParams(query: OfferQuery): URLSearchParams {
  const params = new URLSearchParams();
  if (query.gpu && gpuSpecFor("vramfarm", query.gpu.toLowerCase())) params.set("gpu", query.gpu.toLowerCase());
  if (query.gpu_count !== undefined) params.set("count", String(query.gpu_count));
  return params;
}

/** `vramfarm:<gpu slug>:<count>` → its parts, or null. */
export function parseOfferId(offerId: string): { gpu: string; count: number } | null {
  const match = /^vramfarm:([a-z0-9][a-z0-9-]*):(\d+)$/.exec(offerId);
  return match?.[1] && match[2] ? { gpu: match[1], count: Number(match[2]) } : null;
}

const shellQuote = (value: string) => `'${value.replaceAll("'", `'\\''`)}'`;

/**
 * The `cmd` for a spec. VRAMfarm takes no environment, so the spec's env (among it the lease's
 * call-back URL and token) is exported in front of the command; without a command it is written
 * to /etc/profile.d so SSH sessions see it.
 */
export function commandFor(spec: MachineSpec): string | null {
  const names = Object.keys(spec.env);
  for (const name of names) {
    if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(name))
      throw new Error(`environment variable name not usable in a shell: ${name}`);
  }
  const exports = names.map((name) => `export ${name}=${shellQuote(spec.env[name] ?? "")}`).join("\n");
  if (spec.cmd !== null) return exports ? `${exports}\n${spec.cmd}` : spec.cmd;
  if (!exports) return null;
  return `cat > /etc/profile.d/gpulease-env.sh <<'GPULEASE_ENV'\n${exports}\nGPULEASE_ENV`;
}

export const CreatedSchema = z.object({
  id: z.union([z.number().int(), z.string().regex(/^\d+$/)]),
  status: z.string().optional(),
});

export const ErrorBodySchema = z.object({ error: z.string().optional(), code: z.string().optional() });

export const InstanceSchema = z.object({
  id: z.union([z.number().int(), z.string()]).nullish(),
  status: z.string(),
  gpu: z.string().nullable().optional(),
  count: z.number().int().nullable().optional(),
  image: z.string().nullable().optional(),
  price: z.number().nullable().optional(),
  created_at: z.string().nullable().optional(),
  started_at: z.string().nullable().optional(),
  access: z
    .object({ ssh: z.object({ host: z.string(), port: z.number().int() }).nullable().optional() })
    .nullable()
    .optional(),
  cost_eur: z.number().nullable().optional(),
  traffic_eur: z.number().nullable().optional(),
  error: z.string().nullable().optional(),
});
export type VramfarmInstance = z.infer<typeof InstanceSchema>;

/** Listed servers must carry their id: that is all a listing is good for. */
export const ListedInstanceSchema = InstanceSchema.extend({ id: z.union([z.number().int(), z.string()]) });
export const InstancesResponseSchema = z.object({ instances: z.array(ListedInstanceSchema).nullable() });

export const StopResponseSchema = z.object({ ok: z.boolean(), already: z.boolean().optional() });

export const AccountResponseSchema = z.object({ balance_eur: z.number() });

/**
 * VRAMfarm's status in gpulease's terms. `stopped` is "gone": a stopped server is no longer billed
 * and stays `stopped` forever, so waiting for it to vanish would never end a teardown. A stop
 * nobody asked for (balance at zero, a host fault) carries VRAMfarm's reason in `error`.
 */
export function instanceState(instance: VramfarmInstance): { state: MachineState; error: string | null } {
  switch (instance.status) {
    // A failed start is replaced at no cost under the same id: it stays provisioning.
    case "provisioning":
      return { state: "booting", error: null };
    case "running":
      return { state: "running", error: null };
    case "stopped":
      return { state: "gone", error: instance.error ?? null };
    default:
      return { state: "unknown", error: `VRAMfarm reports status ${instance.status}` };
  }
}
