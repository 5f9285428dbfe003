import { z } from "zod";
import { GPU_SPECS, gpuSpecFor, normaliseGpuName } from "./gpus";
import { vastOfferId } from "./offer-host";
import { OLLAMA_PORT } from "./ollama";
import { OLLAMA_START_ENTRYPOINT, OLLAMA_START_SCRIPT, pullsModel } from "./ollama-start";
import type { Access, MachineSpec, MachineState, OfferQuery, ProviderOffer } from "./types";

/**
 * Vast.ai's wire shapes (docs/providers.md#vastai) and the pure mapping between them and gpulease's
 * types. Only the fields gpulease reads are declared; zod drops the rest (among them the
 * `api_key` that `/users/current/` echoes).
 */

/**
 * The one container disk for the weights that search (`disk_space`), price (`allocated_storage`) and
 * create (`disk`) all use, as gpuhunt and SkyPilot do (docs/providers.md#vast-offers): the disk a lease
 * asks when it names none (`storedSpec` in src/leases/rent.ts), max(40, 2 × weights + 20) GB.
 */
export function vastDiskGb(weightsGb: number): number {
  return Math.max(40, Math.ceil(Math.max(0, weightsGb) * 2) + 20);
}

/** Mining cards (CMP) and old cards, avoided (docs/providers.md#vast-offers). */
const UNWANTED_GPU = ["cmp", "p100", "titan", "gtx 10", "gtx 9"];

export function isUnwantedGpu(gpuName: string): boolean {
  const name = gpuName.toLowerCase();
  return UNWANTED_GPU.some((part) => name.includes(part));
}

/** The cheapest offers first, after Vast has applied every filter, the GPU name among them (docs/providers.md#vast-offers). */
const OFFER_LIMIT = 64;
/** A GPU filter the table cannot spell in Vast's names is checked here over this many offers (gpuhunt's 3000). */
const UNMAPPED_NAME_LIMIT = 3000;

/** The user's gpu filter (a case-insensitive substring, spacing ignored) matches this name. */
function nameMatches(name: string, filter: string): boolean {
  const wanted = normaliseGpuName(filter);
  return (
    name.toLowerCase().includes(filter.trim().toLowerCase()) ||
    (wanted !== "" && normaliseGpuName(name).includes(wanted))
  );
}

/**
 * Vast's own spellings of every card the gpu filter names ("h100" -> "H100 SXM", "H100 PCIE", ...),
 * for `gpu_name: {"in": [...]}` (gpuhunt `make_filters`); empty when the table knows none.
 */
export function vastGpuNames(filter: string): string[] {
  const names = new Set<string>();
  for (const spec of GPU_SPECS) {
    const bySpec = nameMatches(spec.name, filter) || nameMatches(spec.key, filter);
    for (const name of spec.vast) if (bySpec || nameMatches(name, filter)) names.add(name);
  }
  return [...names];
}

/** The `POST /api/v0/bundles/` body for a query. */
export function bundlesQuery(query: OfferQuery, minCudaVersion = 12.4): Record<string, unknown> {
  // The create asks max(the lease's disk, the weights' default): search and price that same size.
  const disk = Math.max(query.disk_gb ?? 0, vastDiskGb(query.weights_gb ?? query.vram_gb ?? 0));
  const body: Record<string, unknown> = {
    verified: { eq: true },
    rentable: { eq: true },
    rented: { eq: false },
    external: { eq: false },
    direct_port_count: { gte: 1 },
    cuda_max_good: { gte: minCudaVersion },
    compute_cap: { gte: 750 },
    // Only hosts with the disk the create will ask (gpuhunt, SkyPilot): otherwise the create
    // asks more than the host has and fails (docs/providers.md#vast-offers).
    disk_space: { gte: disk },
  };
  // Vast's RAM fields are MB (the CLI multiplies user input by 1000): 24 here would match every card.
  // gpu_total_ram is the driver's MiB, below what the cards are sold as ("48 GB" is 46,068 MiB):
  // Vast filters loosely and the sold size is checked on each offer (toOffer).
  if (query.vram_gb !== undefined) body.gpu_total_ram = { gte: Math.floor(query.vram_gb * 1024 * VAST_SOLD_TO_DRIVER) };
  if (query.gpu_count !== undefined) body.num_gpus = { eq: query.gpu_count };
  if (query.max_price_usd !== undefined) body.dph_total = { lte: query.max_price_usd };
  // The CLI spells it "on-demand"; the docs' enum says "ondemand" but their example uses ours.
  body.type = "on-demand";
  body.order = [["dph_total", "asc"]];
  body.limit = OFFER_LIMIT;
  if (query.gpu) {
    // Vast filters the names before its limit: a local filter over the 64 cheapest offers loses
    // every card that is not among them (gpuhunt sends gpu_name "in", and limit 3000 when it cannot map a name).
    const names = vastGpuNames(query.gpu);
    if (names.length > 0) body.gpu_name = { in: names };
    else body.limit = UNMAPPED_NAME_LIMIT;
  }
  // dph_total includes storage for allocated_storage: price the disk the lease will really get.
  body.allocated_storage = disk;
  return body;
}

const nullableNumber = z.number().nullable().optional();

/** The lowest driver MiB per GiB sold in the GPU table (an A10: 23,028 of 24,576): the bundles filter's slack. */
const VAST_SOLD_TO_DRIVER = 0.93;

export const VastOfferSchema = z.object({
  id: z.number().int(),
  gpu_name: z.string(),
  num_gpus: z.number().int().positive(),
  /** MiB over all cards, as the driver reports them (a 4090: 24564) */
  gpu_total_ram: z.number().nonnegative(),
  /** GB/s per card */
  gpu_mem_bw: nullableNumber,
  /** Mbit/s, advertised */
  inet_down: nullableNumber,
  /** USD per GB */
  inet_down_cost: nullableNumber,
  dph_total: z.number().nonnegative(),
  geolocation: z.string().nullable().optional(),
});
export type VastOffer = z.infer<typeof VastOfferSchema>;

/** The list is checked as a whole; each offer on its own (one odd offer must not hide the rest). */
export const BundlesResponseSchema = z.object({ offers: z.array(z.unknown()) });

/** A Vast offer in gpulease's terms, or null when it is an unwanted card or misses the query. */
export function toOffer(offer: VastOffer, query: OfferQuery): ProviderOffer | null {
  if (isUnwantedGpu(offer.gpu_name)) return null;
  const spec = gpuSpecFor("vast", offer.gpu_name);
  const memoryMib = Math.floor(offer.gpu_total_ram);
  // The size the cards are sold as: the table's, else the driver's MiB in whole GiB (24564 -> 24).
  const vramGb = spec ? spec.vram_gb * offer.num_gpus : Math.round(memoryMib / 1024);
  // The bundles filters should already hold; checked again so a loose answer cannot slip through.
  if (query.gpu && !nameMatches(offer.gpu_name, query.gpu) && !vastGpuNames(query.gpu).includes(offer.gpu_name))
    return null;
  if (query.vram_gb !== undefined && vramGb < query.vram_gb) return null;
  if (query.gpu_count !== undefined && offer.num_gpus !== query.gpu_count) return null;
  if (query.max_price_usd !== undefined && offer.dph_total > query.max_price_usd) return null;
  const inetDown = offer.inet_down ?? 0;
  return {
    offer_id: vastOfferId(offer.id),
    provider: "vast",
    gpu: offer.gpu_name,
    gpu_key: spec?.key ?? null,
    gpu_count: offer.num_gpus,
    vram_gb: vramGb,
    memory_mib: memoryMib,
    price_per_hour: offer.dph_total,
    currency: "USD",
    cloud: null,
    availability: "available",
    location: offer.geolocation ?? null,
    bandwidth_gbs: offer.gpu_mem_bw && offer.gpu_mem_bw > 0 ? offer.gpu_mem_bw : null,
    // The advertised line speed is unreliable (docs/providers.md#vast-offers): count on half of it, capped at 2.5 Gbit/s.
    download_mbs: inetDown > 0 ? (Math.min(inetDown, 2500) / 8) * 0.5 : null,
    download_cost_per_gb: offer.inet_down_cost ?? 0,
    min_billed_minutes: 0,
    templates: ["ollama", "custom"],
  };
}

/** The `PUT /api/v0/asks/{id}/` body for a spec. */
export function createBody(spec: MachineSpec): Record<string, unknown> {
  // env must be an object: a "-e K=V" string is rejected (vast-docs "Common Pitfalls").
  // Ports are published by keys "-p H:C" with value "1"; Vast maps each to a random external port.
  const env: Record<string, string> = { ...spec.env };
  const ports = new Set(spec.ports);
  let onstart: string | null = null;
  let args: string[] | null = null;
  if (spec.template === "ollama") {
    ports.add(OLLAMA_PORT);
    env.OLLAMA_HOST = `0.0.0.0:${OLLAMA_PORT}`;
    env.OLLAMA_KEEP_ALIVE = "-1";
    if (spec.context_length !== null) env.OLLAMA_CONTEXT_LENGTH = String(spec.context_length);
    if (pullsModel(spec)) {
      // The container pulls its model itself (the image's ENTRYPOINT is /bin/ollama).
      onstart = OLLAMA_START_ENTRYPOINT[0] as string;
      args = [OLLAMA_START_ENTRYPOINT[1] as string, OLLAMA_START_SCRIPT];
    }
  } else if (spec.cmd !== null) {
    // runtype "args" keeps the image's entrypoint unless onstart overrides it; dstack runs its
    // commands on Vast exactly so (onstart "/bin/sh", args ["-c", ...]), whatever the image's ENTRYPOINT.
    onstart = "/bin/sh";
    args = ["-c", spec.cmd];
  }
  for (const port of ports) env[`-p ${port}:${port}`] = "1";
  return {
    client_id: "me",
    image: spec.image,
    // The size searched and priced; only a lease that names a larger disk asks more (docs/providers.md#vast-offers).
    disk: Math.max(spec.disk_gb, vastDiskGb(spec.weights_gb)),
    label: spec.label,
    env,
    runtype: "args",
    onstart,
    args,
    // null = on-demand; any price makes it an interruptible bid that can be outbid.
    price: null,
    // Without it a taken offer may yield a *stopped* instance instead of an error (docs/providers.md#vast-create).
    cancel_unavail: true,
  };
}

/** Any create answer, success or error; only what gpulease reads. */
export const CreateResponseSchema = z.object({
  success: z.boolean().optional(),
  // a number on the wire; a numeric string is read too rather than lose track of a real instance
  new_contract: z
    .union([z.number().int(), z.string().regex(/^\d+$/).transform(Number)])
    .nullable()
    .optional(),
  error: z.string().optional(),
  msg: z.string().optional(),
  message: z.string().optional(),
  detail: z.string().optional(),
});
export type CreateResponse = z.infer<typeof CreateResponseSchema>;

const PortBindingSchema = z.object({ HostIp: z.string().optional(), HostPort: z.union([z.string(), z.number()]) });

export const VastInstanceSchema = z.object({
  id: z.number().int(),
  actual_status: z.string().nullable().optional(),
  intended_status: z.string().nullable().optional(),
  cur_state: z.string().nullable().optional(),
  next_state: z.string().nullable().optional(),
  status_msg: z.string().nullable().optional(),
  label: z.string().nullable().optional(),
  public_ipaddr: z.string().nullable().optional(),
  // Docker's format; null, {} or absent until running (docs/providers.md#vast-instances).
  ports: z.record(z.string(), z.array(PortBindingSchema).nullable()).nullable().optional(),
  ssh_host: z.string().nullable().optional(),
  ssh_port: z.number().int().nullable().optional(),
  image_runtype: z.string().nullable().optional(),
  dph_total: z.number().nullable().optional(),
  start_date: z.number().nullable().optional(),
});
export type VastInstance = z.infer<typeof VastInstanceSchema>;

/** `GET /api/v0/instances/{id}/`: one object under the plural key; null once deleted (docs/providers.md#vast-instances). */
export const ShowInstanceResponseSchema = z.object({ instances: VastInstanceSchema.nullable() });

/** `GET /api/v1/instances/`: an array, or null for an empty page (vast-cli test). */
export const ListInstancesResponseSchema = z.object({
  instances: z.array(VastInstanceSchema).nullable(),
  next_token: z.string().nullable().optional(),
});

/** vast-cli lists `credit` and the docs `balance`: read credit, fall back to balance. */
export const UserResponseSchema = z
  .object({ credit: z.number().nullish(), balance: z.number().nullish() })
  .refine((u) => u.credit != null || u.balance != null, "neither credit nor balance");

/** Vast's create limits (vast-ai/docs create_instance.yaml): checked before anything is rented. */
export const ENV_VALUE_MAX = 256;
/** `max_total_length` of `env`, read as its names and values together (port keys and gpulease's own included). */
export const ENV_TOTAL_MAX = 32_768;
export const ARGS_TOTAL_MAX = 4096;

/** The spec's problems against Vast's create limits, in plain words. */
export function vastSpecProblems(
  spec: Pick<MachineSpec, "env" | "cmd" | "template"> & Partial<Pick<MachineSpec, "ports">>,
): string[] {
  const problems: string[] = [];
  for (const [key, value] of Object.entries(spec.env))
    if (value.length > ENV_VALUE_MAX)
      problems.push(`env ${key}: Vast.ai takes at most ${ENV_VALUE_MAX} characters per value (${value.length} given)`);
  const body = createBody({
    label: "x",
    template: spec.template,
    image: "x",
    cmd: spec.cmd,
    env: spec.env,
    ports: spec.ports ?? [],
    disk_gb: 1,
    weights_gb: 0,
    context_length: null,
    max_minutes: 1,
  });
  const envLength = Object.entries(body.env as Record<string, string>).reduce(
    (n, [k, v]) => n + k.length + v.length,
    0,
  );
  if (envLength > ENV_TOTAL_MAX)
    problems.push(`env: Vast.ai takes at most ${ENV_TOTAL_MAX} characters of env in total (${envLength} given)`);
  const argsLength =
    ((body.args as string[] | null) ?? []).join(" ").length + ((body.onstart as string | null) ?? "").length;
  if (argsLength > ARGS_TOTAL_MAX)
    problems.push(`cmd: Vast.ai takes at most ${ARGS_TOTAL_MAX} characters of args and onstart (${argsLength} given)`);
  return problems;
}

export const DestroyResponseSchema = z.object({
  success: z.boolean().optional(),
  error: z.string().optional(),
  msg: z.string().optional(),
});

/** vast-cli treats a status_msg with any of these as fatal. */
const FATAL_STATUS_MSG = /oci runtime|error|failed|failure|exception|traceback|permission denied/i;

export interface VastState {
  state: MachineState;
  error: string | null;
}

/** Vast's instance states in gpulease's terms (docs/providers.md#vast-instances). */
export function instanceState(instance: VastInstance): VastState {
  const actual = instance.actual_status ?? null;
  const intended = instance.intended_status ?? null;
  const message = instance.status_msg?.trim() || null;
  // `destroyed`/`terminated` in actual_status or cur_state is gone (vast-cli instance_exist).
  // vast-cli also counts `offline` as gone, but an offline host can come back and bill: not here.
  const contract = instance.cur_state ?? null;
  if (GONE_STATES.has(actual ?? "") || GONE_STATES.has(contract ?? "")) return { state: "gone", error: null };
  if (intended === "destroyed") return { state: "exited", error: "destroyed; waiting for Vast to drop the instance" };
  if (actual === "running") {
    // Ready means both agree (vast-cli wait_for_instance); running while intended elsewhere is on its way down.
    if (intended === null || intended === "running") return { state: "running", error: null };
    return { state: "exited", error: message ?? `Vast is taking it to ${intended}` };
  }
  // exited/unknown/offline "will never reach running" (vast-docs show-instance).
  if (actual === "exited" || actual === "unknown" || actual === "offline") {
    return { state: "exited", error: message ?? `Vast reports ${actual}` };
  }
  // An OCI error with actual_status "created" (dstack) or any status_msg vast-cli calls fatal.
  if (message && FATAL_STATUS_MSG.test(message)) return { state: "exited", error: message };
  if (actual === "stopped" || actual === "frozen") {
    // cur/intended/next all "stopped": a spot instance outbid or interrupted (dstack).
    if (intended !== "running")
      return { state: "exited", error: message ?? `Vast reports ${actual} (outbid or interrupted)` };
    return { state: "booting", error: null };
  }
  // null (provisioning), loading (image pull), created (container made), rebooting.
  return { state: "booting", error: null };
}

const GONE_STATES = new Set(["destroyed", "terminated"]);

/** Access once running: `http://{public_ipaddr}:{HostPort}` per published port, Ollama's first. */
export function instanceAccess(instance: VastInstance): Access {
  const ip = instance.public_ipaddr?.trim() || null;
  const urls: string[] = [];
  if (ip) {
    const published = Object.entries(instance.ports ?? {})
      .map(([key, bindings]) => ({
        port: Number.parseInt(key, 10),
        tcp: key.endsWith("/tcp"),
        hostPort: bindings?.[0]?.HostPort,
      }))
      // 22 is reached through ssh_host/ssh_port below.
      .filter(
        (p) =>
          p.tcp && Number.isInteger(p.port) && p.port !== 22 && p.hostPort !== undefined && String(p.hostPort) !== "",
      )
      .sort((a, b) => (a.port === OLLAMA_PORT ? -1 : b.port === OLLAMA_PORT ? 1 : a.port - b.port));
    // HostPort is a string and random (41207), never the container's 11434 (docs/providers.md#vast-instances).
    for (const p of published) urls.push(`http://${ip}:${String(p.hostPort).trim()}`);
  }
  // runtype "args" "runs the image as-is": no sshd, whatever ssh_host/ssh_port say.
  const runsAsIs = (instance.image_runtype ?? "args")
    .trim()
    .split(/\s+/)
    .every((t) => t === "args");
  const sshHost = runsAsIs ? null : instance.ssh_host?.trim() || null;
  const ssh = sshHost && instance.ssh_port ? { host: sshHost, port: instance.ssh_port } : null;
  return { urls, ssh };
}

/**
 * `GET /api/v0/charges/` (vast-ai/docs `show-charges`; vast-ai/vast-cli `vastai/api/billing.py`
 * `show_invoices_v1` with `charges`): one result per contract with its charge in the `day` window,
 * USD; `source` is `instance-<id>` for an instance.
 */
export const ChargesResponseSchema = z.object({
  results: z
    .array(
      z.object({
        type: z.string().nullish(),
        source: z.string().nullish(),
        amount: z.number(),
      }),
    )
    .nullish(),
  next_token: z.string().nullish(),
});
