import { z } from "zod";
import { SIM_GPU_SLUGS } from "./catalogue";

/**
 * The simulated cloud's knobs. Input schemas carry no transforms (the control route reuses them
 * in its OpenAPI document); normaliseFaults() turns the accepted shorthands into one form.
 */

const seconds = z.number().min(0).max(86_400);
const gpuSlug = z.enum(SIM_GPU_SLUGS);
const reason = z.string().trim().min(1).max(300);

/** Every fault is switched on for machines created (or calls made) after it is set. */
export const SimFaultsPatchSchema = z
  .object({
    /** true: every GPU type; a slug or a list: those types. Offers stay listed, create fails. */
    no_capacity: z.union([z.boolean(), gpuSlug, z.array(gpuSlug)]),
    /** new machines never finish booting */
    stuck_booting: z.boolean(),
    /** new machines fail to start: true (a generic reason) or the provider's reason */
    fail_start: z.union([z.boolean(), reason, z.null()]),
    /** each new machine answers its first N terminates with "ok" and ignores them */
    ignore_terminates: z.number().int().min(0).max(100),
    /** status reads fail */
    status_error: z.boolean(),
    /** listings fail (list own machines, find by label) */
    listing_error: z.boolean(),
    /**
     * machines die on their own `after_seconds` after they come up (true: at once); switching it
     * on also applies to the machines alive now
     */
    exit: z.union([z.boolean(), z.null(), z.object({ after_seconds: seconds, reason: reason.optional() }).strict()]),
    /** create answers with an error although the machine was created (and carries its label) */
    error_but_created: z.boolean(),
    /**
     * every pull of a model fails with Ollama's error text: true (the registry has no such
     * manifest), the text, or the text and how far the download gets first (disk full at 40 %)
     */
    pull_failure: z.union([
      z.boolean(),
      z.null(),
      reason,
      z.object({ error: reason, after_fraction: z.number().min(0).max(1).optional() }).strict(),
    ]),
    /**
     * a loaded model sits only partly on the GPUs (`/api/ps` size_vram < size): true (60 %) or
     * the share on the GPUs; false: as much as the machine's VRAM holds
     */
    partial_gpu: z.union([z.boolean(), z.number().min(0).max(1)]),
  })
  .partial()
  .strict();
export type SimFaultsPatch = z.infer<typeof SimFaultsPatchSchema>;

export interface SimFaults {
  /** false, true (all types) or the GPU slugs without capacity */
  no_capacity: boolean | string[];
  stuck_booting: boolean;
  fail_start: string | null;
  ignore_terminates: number;
  status_error: boolean;
  listing_error: boolean;
  exit: { after_seconds: number; reason: string } | null;
  error_but_created: boolean;
  pull_failure: { error: string; after_fraction: number } | null;
  /** share of a loaded model on the GPUs; null: as much as fits */
  partial_gpu: number | null;
}

/** What configure() accepts: any subset; what is left out keeps its value. */
export const SimConfigPatchSchema = z
  .object({
    bootSeconds: seconds,
    lingerSeconds: seconds,
    /** Ollama answers this long after the machine is running */
    readySeconds: seconds,
    /** how fast machines download model weights, MB/s (a pull takes weights / this) */
    downloadMbs: z.number().min(0.001).max(100_000),
    /** the account's credit; the balance is this minus what machines have cost */
    creditUsd: z.number().min(0).max(1_000_000),
    /** multiplies every GPU type's stock (load benches rent hundreds of machines) */
    stockScale: z.number().int().min(1).max(1000),
    faults: SimFaultsPatchSchema,
  })
  .partial()
  .strict();
export type SimConfigPatch = z.infer<typeof SimConfigPatchSchema>;

export interface SimSettings {
  bootSeconds: number;
  lingerSeconds: number;
  readySeconds: number;
  downloadMbs: number;
  creditUsd: number;
  stockScale: number;
  faults: SimFaults;
}

export const DEFAULT_FAIL_REASON = "container failed to start: image pull back-off (simulated)";
export const DEFAULT_EXIT_REASON = "host lost: the machine stopped on its own (simulated)";
/** Ollama's own words when the registry has no such manifest */
export const DEFAULT_PULL_FAILURE = "pull model manifest: file does not exist";
const DEFAULT_GPU_SHARE = 0.6;

export const NO_FAULTS: SimFaults = {
  no_capacity: false,
  stuck_booting: false,
  fail_start: null,
  ignore_terminates: 0,
  status_error: false,
  listing_error: false,
  exit: null,
  error_but_created: false,
  pull_failure: null,
  partial_gpu: null,
};

/**
 * Suited to `npm start`: a lease comes up in half a minute, like a warm RunPod pod; a model lease
 * of llama3.2:1b (1.3 GB at 250 MB/s) about five seconds later.
 */
export const DEFAULT_SETTINGS: SimSettings = {
  bootSeconds: 15,
  lingerSeconds: 8,
  readySeconds: 5,
  downloadMbs: 250,
  creditUsd: 100,
  stockScale: 1,
  faults: NO_FAULTS,
};

export function normaliseFaults(current: SimFaults, patch: SimFaultsPatch): SimFaults {
  const next: SimFaults = { ...current };
  if (patch.no_capacity !== undefined) {
    const v = patch.no_capacity;
    next.no_capacity = typeof v === "string" ? [v] : Array.isArray(v) ? [...new Set(v)] : v;
  }
  if (patch.stuck_booting !== undefined) next.stuck_booting = patch.stuck_booting;
  if (patch.fail_start !== undefined) {
    const v = patch.fail_start;
    next.fail_start = v === true ? DEFAULT_FAIL_REASON : v === false ? null : v;
  }
  if (patch.ignore_terminates !== undefined) next.ignore_terminates = patch.ignore_terminates;
  if (patch.status_error !== undefined) next.status_error = patch.status_error;
  if (patch.listing_error !== undefined) next.listing_error = patch.listing_error;
  if (patch.exit !== undefined) {
    const v = patch.exit;
    next.exit =
      v === true
        ? { after_seconds: 0, reason: DEFAULT_EXIT_REASON }
        : v === false || v === null
          ? null
          : { after_seconds: v.after_seconds, reason: v.reason ?? DEFAULT_EXIT_REASON };
  }
  if (patch.error_but_created !== undefined) next.error_but_created = patch.error_but_created;
  if (patch.pull_failure !== undefined) {
    const v = patch.pull_failure;
    next.pull_failure =
      v === true
        ? { error: DEFAULT_PULL_FAILURE, after_fraction: 0 }
        : v === false || v === null
          ? null
          : typeof v === "string"
            ? { error: v, after_fraction: 0 }
            : { error: v.error, after_fraction: v.after_fraction ?? 0 };
  }
  if (patch.partial_gpu !== undefined) {
    const v = patch.partial_gpu;
    next.partial_gpu = v === true ? DEFAULT_GPU_SHARE : v === false ? null : v;
  }
  return next;
}

export function applyConfigPatch(current: SimSettings, patch: SimConfigPatch): SimSettings {
  return {
    bootSeconds: patch.bootSeconds ?? current.bootSeconds,
    lingerSeconds: patch.lingerSeconds ?? current.lingerSeconds,
    readySeconds: patch.readySeconds ?? current.readySeconds,
    downloadMbs: patch.downloadMbs ?? current.downloadMbs,
    creditUsd: patch.creditUsd ?? current.creditUsd,
    stockScale: patch.stockScale ?? current.stockScale ?? 1,
    faults: patch.faults ? normaliseFaults(current.faults, patch.faults) : current.faults,
  };
}

/** Settings stored by an older version lack the newer knobs: they get the defaults. */
export function withDefaults(stored: SimSettings): SimSettings {
  return {
    ...DEFAULT_SETTINGS,
    ...stored,
    downloadMbs: stored.downloadMbs ?? DEFAULT_SETTINGS.downloadMbs,
    faults: { ...NO_FAULTS, ...stored.faults },
  };
}

export function hasNoCapacity(faults: SimFaults, slug: string): boolean {
  return faults.no_capacity === true || (Array.isArray(faults.no_capacity) && faults.no_capacity.includes(slug));
}
