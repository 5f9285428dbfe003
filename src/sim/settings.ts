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
}

/** What configure() accepts: any subset; what is left out keeps its value. */
export const SimConfigPatchSchema = z
  .object({
    bootSeconds: seconds,
    lingerSeconds: seconds,
    /** Ollama answers this long after the machine is running */
    readySeconds: seconds,
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
  creditUsd: number;
  stockScale: number;
  faults: SimFaults;
}

export const DEFAULT_FAIL_REASON = "container failed to start: image pull back-off (simulated)";
export const DEFAULT_EXIT_REASON = "host lost: the machine stopped on its own (simulated)";

export const NO_FAULTS: SimFaults = {
  no_capacity: false,
  stuck_booting: false,
  fail_start: null,
  ignore_terminates: 0,
  status_error: false,
  listing_error: false,
  exit: null,
  error_but_created: false,
};

/** Suited to `npm start`: a lease comes up in half a minute, like a warm RunPod pod. */
export const DEFAULT_SETTINGS: SimSettings = {
  bootSeconds: 20,
  lingerSeconds: 8,
  readySeconds: 10,
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
  return next;
}

export function applyConfigPatch(current: SimSettings, patch: SimConfigPatch): SimSettings {
  return {
    bootSeconds: patch.bootSeconds ?? current.bootSeconds,
    lingerSeconds: patch.lingerSeconds ?? current.lingerSeconds,
    readySeconds: patch.readySeconds ?? current.readySeconds,
    creditUsd: patch.creditUsd ?? current.creditUsd,
    stockScale: patch.stockScale ?? current.stockScale ?? 1,
    faults: patch.faults ? normaliseFaults(current.faults, patch.faults) : current.faults,
  };
}

export function hasNoCapacity(faults: SimFaults, slug: string): boolean {
  return faults.no_capacity === true || (Array.isArray(faults.no_capacity) && faults.no_capacity.includes(slug));
}
