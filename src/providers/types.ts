import { z } from "zod";
import type { ModelLibrary } from "../models/facts";

import { type ProviderName, providerNames } from "./catalogue";

export { type ProviderName, providerNames };
export const ProviderNameSchema = z.enum(providerNames);

export const CurrencySchema = z.enum(["USD", "EUR"]);
export type Currency = z.infer<typeof CurrencySchema>;

export const TemplateSchema = z.enum(["ollama", "custom"]);
export type Template = z.infer<typeof TemplateSchema>;

/** An offer as a provider adapter normalises it, before ranking. */
export const ProviderOfferSchema = z.object({
  /** opaque, `<provider>:...`; enough for the adapter to rent it again */
  offer_id: z.string(),
  provider: ProviderNameSchema,
  /** short display name, e.g. "RTX 4090" */
  gpu: z.string(),
  /** key into the GPU spec table, or null when the card is unknown */
  gpu_key: z.string().nullable(),
  gpu_count: z.number().int().positive(),
  /** total GPU memory over all cards, GB, as the cards are sold ("48 GB" for an L40S) */
  vram_gb: z.number().nonnegative(),
  /**
   * total GPU memory over all cards as the driver reports it, MiB, where the provider says
   * (Vast.ai `gpu_total_ram`); else the GPU table's figure (offerMemoryMib)
   */
  memory_mib: z.number().int().nonnegative().nullable().optional(),
  /** whole machine, per hour, in `currency` */
  price_per_hour: z.number().nonnegative(),
  currency: CurrencySchema,
  cloud: z.string().nullable(),
  availability: z.string().nullable(),
  location: z.string().nullable(),
  /** per card GB/s when the provider reports it (Vast gpu_mem_bw); else the spec table decides */
  bandwidth_gbs: z.number().positive().nullable(),
  /** host download speed in MB/s used for the load-time estimate; null = provider default */
  download_mbs: z.number().positive().nullable(),
  /** per GB downloaded, in `currency` */
  download_cost_per_gb: z.number().nonnegative(),
  /** minimum billed minutes per start (VRAMfarm: 15) */
  min_billed_minutes: z.number().int().nonnegative(),
  /** which lease templates this offer can run */
  templates: z.array(TemplateSchema),
});
export type ProviderOffer = z.infer<typeof ProviderOfferSchema>;

/** Filters every adapter understands; amounts in USD. */
export interface OfferQuery {
  vram_gb?: number;
  weights_gb?: number;
  /** the disk the create will ask, GB, when the lease names one */
  disk_gb?: number;
  gpu?: string;
  gpu_count?: number;
  max_price_usd?: number;
  template?: Template;
}

/** What to run on a rented machine. */
export const MachineSpecSchema = z.object({
  label: z.string(),
  template: TemplateSchema,
  image: z.string(),
  cmd: z.string().nullable(),
  env: z.record(z.string(), z.string()),
  ports: z.array(z.number().int()),
  disk_gb: z.number().int().positive(),
  weights_gb: z.number().nonnegative(),
  context_length: z.number().int().positive().nullable(),
  max_minutes: z.number().int().positive(),
});
export type MachineSpec = z.infer<typeof MachineSpecSchema>;

export const AccessSchema = z.object({
  urls: z.array(z.string()),
  ssh: z.object({ host: z.string(), port: z.number().int() }).nullable(),
  /** an Ollama lease: its server's OpenAI-compatible base URL (`<url>/v1`) */
  openai_base_url: z.string().nullable().optional(),
});
export type Access = z.infer<typeof AccessSchema>;

/** The outcome of one rent call. `ambiguous`: a machine may exist; look it up by label. */
export type RentResult =
  | { ok: true; ref: string; price_per_hour: number | null }
  | { ok: false; kind: "no_capacity" | "rejected" | "ambiguous"; error: string };

export const machineStates = ["booting", "running", "exited", "gone", "unknown"] as const;
export type MachineState = (typeof machineStates)[number];

/** A status read. `unknown` (the read failed or made no sense) always counts as "still exists". */
export interface MachineStatus {
  state: MachineState;
  access: Access | null;
  /** what the provider says this machine has cost so far, in its currency, when it reports it */
  cost: number | null;
  /** traffic charges so far, in the provider's currency, when reported separately */
  traffic_cost: number | null;
  /** the price per hour the provider reports for the running machine */
  price_per_hour: number | null;
  /** the provider's reason for a failed start or a stop nobody asked for */
  error: string | null;
}

/** A machine found in a provider's own listing. */
export interface OwnMachine {
  ref: string;
  label: string | null;
  state: MachineState;
  created_at: string | null;
  price_per_hour: number | null;
}

/** How far an Ollama server is with a lease's model (src/providers/ollama.ts `probeOllama`). */
export type OllamaProbe =
  /** no server answers yet */
  | { phase: "down" }
  /** the server answers; the model is being pulled (progress when the pull stream gave one) */
  | { phase: "pulling"; completed: number | null; total: number | null }
  /** pulled, not yet (fully) loaded and answering */
  | { phase: "loading"; digest: string }
  /** loaded with part of it in host memory: it does not fit the GPUs */
  | { phase: "spilled"; digest: string; size: number; size_vram: number }
  /** a one-token generation of the model answered (digest "" for an empty server) */
  | {
      phase: "ready";
      digest: string;
      /** when the server says its runner finished loading the model (ms), where it said */
      loaded_at?: number | null;
    }
  /** the server said the model cannot be had (its own error text) */
  | { phase: "failed"; error: string };

/** One pass over a provider's own machines. `next`: where a listing cut short by the page bound goes on (null: it reached the end). */
export interface OwnListing {
  machines: OwnMachine[];
  next: string | null;
  /**
   * Why this listing is not a view of every state a machine can bill in (VRAMfarm refused its
   * `provisioning` filter); absent when every state was listed. Like a listing cut short, a partial
   * one proves only what it shows: never that a machine is missing.
   */
  partial?: string;
}

/** What a create looked like, for providers that cannot look a machine up by its label. */
export interface LookupHint {
  /** the lease's creation: the machine cannot be older */
  createdAfter: string;
  offerId: string | null;
  image: string | null;
  /** machines of this provider the ledger already knows: never the one looked for */
  knownRefs: string[];
  /** other leases' creates still unresolved with the same fingerprint: a match could be theirs */
  competing: number;
  /**
   * Past the create's timeout: servers that cannot be told apart are shared out by age instead of
   * refused (they belong to some create of this deployment): the `older`-th oldest match is this
   * create's, null when older creates take every match.
   */
  settle?: { older: number };
}

/** What a provider says it billed for one machine over one UTC day, in its currency. */
export interface BilledDay {
  /** YYYY-MM-DD, UTC */
  day: string;
  amount: number;
}

export interface Balance {
  amount: number;
  currency: Currency;
}

/**
 * One cloud behind one interface. Every method parses the provider's answer with zod;
 * transport and protocol failures throw ProviderError (never a raw Error with a body).
 */
export interface Provider {
  readonly name: ProviderName;
  readonly currency: Currency;
  /** false when machines carry no label: findByLabel then needs a LookupHint */
  readonly labelled: boolean;
  /**
   * When billing starts: "accepted" = from the accepted rental, the image pull included (RunPod,
   * Vast.ai, sim); "running" = only once the machine runs (VRAMfarm's provisioning is free).
   */
  readonly billingStartsAt: "accepted" | "running";
  /** minimum billed minutes per start (VRAMfarm: 15; others 0) */
  readonly minimumBilledMinutes: number;
  /**
   * How many offer searches the provider allows in a window, for the whole account (Vast.ai:
   * 10 a minute); absent: no limit the worker must keep. The offers cache shares it across
   * every instance of the worker.
   */
  readonly searchBudget?: { limit: number; windowMs: number };
  /**
   * Where this provider's machines pull models from when it is not the registry the worker is
   * configured with (OLLAMA_REGISTRY_URL): a library asked in process (the sim's, SIM_MODELS=library).
   * Its offers are sized from it. Absent: the configured registry.
   */
  readonly modelLibrary?: ModelLibrary;
  listOffers(query: OfferQuery): Promise<ProviderOffer[]>;
  rent(offer: ProviderOffer, spec: MachineSpec): Promise<RentResult>;
  status(ref: string): Promise<MachineStatus>;
  /** Idempotent: "already gone" resolves. Resolving proves nothing: only status() proves absence. */
  terminate(ref: string): Promise<void>;
  /**
   * The machine carrying exactly this label, or null; throws when the listing failed or did not
   * see everything (a page not read, a state the provider refused to list): null is answered only
   * from a complete view. A provider without labels (VRAMfarm) needs the hint to recognise the
   * machine and throws without it.
   */
  findByLabel(label: string, hint?: LookupHint): Promise<OwnMachine | null>;
  /**
   * Own machines: those whose label starts with `prefix`; for a provider without labels, the
   * ones among `knownRefs`. Paged up to the adapter's bound on pages per call, from the first
   * page or from `from` (an earlier listing's `next`); `next` is null once the last page was
   * read; `partial` says when a state could not be listed. Throws when any page fails or does not parse, and CursorRefusedError when the provider
   * no longer accepts `from`.
   */
  listOwn(prefix: string, knownRefs: string[], from?: string | null): Promise<OwnListing>;
  balance(): Promise<Balance>;
  /**
   * Provider-specific limits on what a machine may be given (env value or args length, ...):
   * the problems in plain words, empty when the spec is fine. Checked before anything is rented.
   */
  validateSpec?(spec: Pick<MachineSpec, "env" | "cmd" | "template">): string[];
  /**
   * What the provider itself billed for this machine per UTC day between `from` and `to` (ISO),
   * where it reports it per machine (RunPod REST `/v2/billing/pods`); absent elsewhere.
   */
  billedDays?(ref: string, from: string, to: string): Promise<BilledDay[]>;
  /**
   * For the Ollama template: how far the server on the machine is with `model` (null: an empty
   * server, ready once it answers). Called only once status() says running; drives the pull
   * (see ollama.ts `probeOllama`). Never throws: a failed read is `down`.
   */
  ollamaProbe(ref: string, status: MachineStatus, model: string | null): Promise<OllamaProbe>;
  /**
   * How the worker reaches a machine's ports (the gateway's forwarding): absent, over the network.
   * The sim's machines are served by the worker itself and are reached in-process.
   */
  readonly machineFetch?: (request: Request) => Promise<Response>;
}
