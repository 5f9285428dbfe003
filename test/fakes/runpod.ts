import { CloudModel, type ModelMachine } from "../../src/sim/model";
import type { FakeService } from "./install";
import { envOf, FakeOllama } from "./ollama";
import { json, text } from "./respond";
import { handleRest } from "./runpod-rest";

/*
 * A fake of RunPod's GraphQL API (POST /graphql) and its HTTP proxy
 * (`{podId}-{port}.proxy.runpod.fake`), speaking the wire shapes docs/providers.md#runpod-graphql records (its "Recorded
 * responses". It parses the GraphQL document it is sent (operation, variables, selection sets)
 * and answers only the selected fields, so an adapter that asks for a field RunPod lacks, or
 * puts a selection on a scalar, gets the 400 RunPod would send. Every quirk in docs/providers.md's
 * list that applies to GraphQL has a switch in `quirks`; `faults` injects transport failures.
 */

export const RUNPOD_FAKE_URL = "http://runpod.fake/graphql";
export const RUNPOD_FAKE_KEY = "rpa_TESTKEY_runpod_0123456789";

/** The no-capacity wordings RunPod has used (docs/providers.md#runpod-no-capacity). */
export const NO_CAPACITY_MESSAGES = {
  requested:
    "There are no longer any instances available with the requested specifications. Please refresh and try again.",
  request: "There are no longer any instances available with the request specifications. Please try again later.",
  disk: "There are no longer any instances available with enough disk space.",
  spot: "There are no instances available with the request specifications. Please try again later.",
  gpus: "There are not enough free GPUs on the host machine to start this pod",
  cuda: "No compatible CUDA host is currently available.\n",
  supplyConstraint: "Supply constraint: please try another GPU type.",
} as const;
export type NoCapacityVariant = keyof typeof NO_CAPACITY_MESSAGES;

/**
 * What a request asks for, on either transport: REST v2 `GET /v2/catalog/gpus` is "gpuTypes",
 * `POST /v2/pods` "deploy", `GET /v2/pods/{id}` "pod", `DELETE /v2/pods/{id}` "terminate",
 * `GET /v2/pods` "myself" (the listing) and `GET /v2/billing/pods` "billing". So faults and
 * call counts work the same on both.
 */
export type RunpodOperation = "gpuTypes" | "dataCenters" | "deploy" | "pod" | "terminate" | "myself" | "billing";

export type RunpodFault =
  | { kind: "status"; status: number; body?: string; headers?: Record<string, string> }
  /** no answer until the caller's timeout aborts the request */
  | { kind: "hang" }
  /** HTTP 200 with a body that is not JSON */
  | { kind: "malformed" }
  /** HTTP 200 with an empty body */
  | { kind: "empty" }
  /**
   * GraphQL only: the schema no longer knows `field` (a field RunPod dropped, as it dropped
   * `supportPublicIp`): graphql-js refuses the variable with the whole value inspected in the
   * message, so everything sent, env values included, comes back in the error text.
   */
  | { kind: "unknownField"; field: string };

export interface RunpodQuirks {
  /** 1: 403 text/plain "error code: 1010" without a User-Agent or with a bot UA (Cloudflare) */
  cloudflareBlocksBots: boolean;
  /** 3: unknown input fields or badly typed variables answer HTTP 400 before anything happens */
  strictInput: boolean;
  /** 4: "bad_key" = 401 whatever is sent; "no_permission" = 200 + "Unauthorized" (read-only key) */
  auth: "ok" | "bad_key" | "no_permission";
  /** 4 (scrubbing): error texts echo the Authorization header, as careless servers do */
  echoKeyInErrors: boolean;
  /**
   * 5, 6: the next `times` creates answer no capacity with this wording (and code), even while
   * dataCenters reports stock; `acceptLean` lets a create with ≤ 15 GB RAM through.
   */
  noCapacity: { variant: NoCapacityVariant; code?: string; times: number; acceptLean?: boolean } | null;
  /** 7: runtime stays null this long after create (image pull) */
  bootMs: number;
  /** 7: runtime null forever: billed, never started */
  stuckBooting: boolean;
  /** 8: after boot, runtime is present with uptime 0 and no ports for this long */
  runtimeWithoutPortsMs: number;
  /** 8: how the missing ports look */
  runtimePortsMissingAs: "null" | "empty";
  /** 9: whether tcp ports get a public IP (http ports always show an internal 100.65.x.x) */
  publicIp: boolean;
  /** 10: the proxy answers 502 until Ollama listens, this long after the ports appear */
  ollamaListenDelayMs: number;
  ollamaNeverListens: boolean;
  /** 11: after terminate the pod lingers this long, shown as `lingerShowsAs`, then `pod: null` */
  lingerMs: number;
  lingerShowsAs: "TERMINATED" | "RUNNING";
  /** 12: "pod not found to terminate" carries extensions.code POD_NOT_FOUND */
  notFoundCode: boolean;
  /** 12: terminate of a new pod is answered null and ignored this many times */
  ignoreTerminates: number;
  /** 15: create makes the pod but answers an error */
  errorButCreated: "graphql_error" | "http_500" | "hang" | null;
  /** 15: a new pod shows up in `myself.pods` only this long after create */
  listingLagMs: number;
  /** REST v2: `runtime: {}` instead of null while the container is not up (RunPod's own create example) */
  restEmptyRuntime: boolean;
  /** REST v2: what `/v2/billing/pods` bills, as a multiple of price x hours (1 = the ledger's own figure) */
  billingFactor: number;
  /**
   * REST v2: pods per `GET /v2/pods` page at most, whatever `limit` asks (the server's own cap).
   * 1 by default, so every suite that lists two pods crosses a page (docs/providers.md#runpod-rest-pages);
   * a suite with more pods than the adapter's POD_PAGES_PER_CALL raises it.
   */
  podsPageSize: number;
  /** REST v2: a listing `cursor` older than this is refused like an unknown one; null: never expires */
  podsCursorTtlMs: number | null;
  /**
   * REST v2: the create's command form RunPod takes, `cmd` (`cmd`/`entrypoint` arrays, the newest
   * runpodctl) or `args` (one string, the kept document); the other is a 422.
   */
  restCommandFields: "cmd" | "args";
  /**
   * REST v2: status RUNNING from creation, several polls before `runtime` exists (recorded live);
   * else PROVISIONING, then STARTING, then RUNNING with its runtime (the document's lifecycle).
   */
  restRunningBeforeRuntime: boolean;
  /** REST v2: a COMMUNITY pod's TCP ports get a public IP (false: the host has none, ssh.direct stays null) */
  communityPublicIp: boolean;
  /** REST v2: entries appended to every catalogue answer as they are (a new or odd GPU type) */
  restCatalogExtras: Record<string, unknown>[];
}

export const defaultRunpodQuirks = (): RunpodQuirks => ({
  cloudflareBlocksBots: true,
  strictInput: true,
  auth: "ok",
  echoKeyInErrors: false,
  noCapacity: null,
  bootMs: 0,
  stuckBooting: false,
  runtimeWithoutPortsMs: 0,
  runtimePortsMissingAs: "null",
  publicIp: true,
  ollamaListenDelayMs: 0,
  ollamaNeverListens: false,
  lingerMs: 0,
  lingerShowsAs: "TERMINATED",
  notFoundCode: true,
  ignoreTerminates: 0,
  errorButCreated: null,
  listingLagMs: 0,
  restEmptyRuntime: false,
  billingFactor: 1,
  podsPageSize: 1,
  podsCursorTtlMs: null,
  restCommandFields: "cmd",
  restRunningBeforeRuntime: false,
  restCatalogExtras: [],
  communityPublicIp: false,
});

export interface FakeGpuType {
  id: string;
  displayName: string;
  manufacturer: "Nvidia" | "AMD";
  /** what RunPod says: the size the card is sold as (48 for an A40) */
  memoryInGb: number;
  /** what the pod's driver reports (nvidia-smi memory.total, MiB): what a model must fit in */
  memoryMib: number;
  secureCloud: boolean;
  communityCloud: boolean;
  securePrice: number | null;
  communityPrice: number | null;
  maxGpuCount: number;
}

export interface FakeDataCenter {
  id: string;
  name: string;
  location: string;
  gpuAvailability: { gpuTypeId: string; displayName: string; available: boolean; stockStatus: string | null }[] | null;
}

const gpuType = (
  id: string,
  displayName: string,
  memoryInGb: number,
  memoryMib: number,
  securePrice: number | null,
  communityPrice: number | null,
  manufacturer: "Nvidia" | "AMD" = "Nvidia",
): FakeGpuType => ({
  id,
  displayName,
  manufacturer,
  memoryInGb,
  memoryMib,
  secureCloud: securePrice !== null,
  communityCloud: communityPrice !== null,
  securePrice,
  communityPrice,
  maxGpuCount: 8,
});

/** A small catalogue: in stock, out of stock ("None" and null), AMD, and a type whose display name is not its id. */
export const defaultGpuTypes = (): FakeGpuType[] => [
  gpuType("NVIDIA GeForce RTX 4090", "RTX 4090", 24, 24_564, 0.69, 0.34),
  gpuType("NVIDIA A40", "A40", 48, 46_068, 0.4, 0.35),
  gpuType("NVIDIA H100 80GB HBM3", "H100 SXM", 80, 81_559, 2.99, null),
  gpuType("NVIDIA L40S", "L40S", 48, 46_068, 0.86, 0.79),
  gpuType("AMD Instinct MI300X OAM", "MI300X", 192, 196_288, 2.49, null, "AMD"),
  // docs/providers.md#gpu-names: "RTX PRO 4500" here, "NVIDIA RTX PRO 4500 Blackwell" as the id and elsewhere
  gpuType("NVIDIA RTX PRO 4500 Blackwell", "RTX PRO 4500", 32, 32_623, 0.49, null),
];

export const defaultDataCenters = (): FakeDataCenter[] => [
  {
    id: "EU-RO-1",
    name: "EU-RO-1",
    location: "Romania",
    gpuAvailability: [
      { gpuTypeId: "NVIDIA GeForce RTX 4090", displayName: "RTX 4090", available: true, stockStatus: "Low" },
      { gpuTypeId: "NVIDIA A40", displayName: "A40", available: true, stockStatus: "Low" },
      { gpuTypeId: "NVIDIA H100 80GB HBM3", displayName: "H100 SXM", available: false, stockStatus: null },
    ],
  },
  {
    id: "US-TX-3",
    name: "US-TX-3",
    location: "United States",
    gpuAvailability: [
      { gpuTypeId: "NVIDIA GeForce RTX 4090", displayName: "RTX 4090", available: true, stockStatus: "High" },
      { gpuTypeId: "NVIDIA L40S", displayName: "L40S", available: false, stockStatus: "None" },
      { gpuTypeId: "AMD Instinct MI300X OAM", displayName: "MI300X", available: true, stockStatus: "High" },
      {
        gpuTypeId: "NVIDIA RTX PRO 4500 Blackwell",
        displayName: "RTX PRO 4500 Blackwell",
        available: true,
        stockStatus: "Medium",
      },
    ],
  },
  // A DC without GPUs sends null.
  { id: "EUR-IS-1", name: "EUR-IS-1", location: "Iceland", gpuAvailability: null },
];

export interface RecordedRunpodRequest {
  transport: "graphql" | "rest";
  url: string;
  method: string;
  userAgent: string | null;
  authorization: string | null;
  operations: RunpodOperation[];
  query: string;
  variables: Record<string, unknown>;
  status: number;
}

export interface PlantPod {
  name: string;
  gpuTypeId?: string;
  gpuCount?: number;
  ports?: string;
  /** default: already running */
  bootMs?: number;
  ignoreTerminates?: number;
  lingerMs?: number;
  /** default 0: listed at once */
  listed?: boolean;
  /** the container's environment (GPULEASE_MODEL makes its Ollama pull and load that model) */
  env?: Record<string, string>;
}

// The input fields PodFindAndDeployOnDemandInput has (docs/providers.md#runpod-graphql); anything else is a 400.
const DEPLOY_INPUT_FIELDS = new Set([
  "aiApiId",
  "allowedCudaVersions",
  "cloudType",
  "computeType",
  "containerDiskInGb",
  "containerRegistryAuthId",
  "countryCode",
  "cudaVersion",
  "dataCenterId",
  "deployCost",
  "dockerArgs",
  "env",
  "gpuCount",
  "gpuTypeId",
  "gpuTypeIdList",
  "imageName",
  "instanceIds",
  "minCudaVersion",
  "minDisk",
  "minDownload",
  "minMemoryInGb",
  "minUpload",
  "minVcpuCount",
  "name",
  "networkVolumeId",
  "port",
  "ports",
  "savingsPlan",
  "startJupyter",
  "startSsh",
  "stopAfter",
  "supportPublicIp",
  "templateId",
  "terminateAfter",
  "volumeInGb",
  "volumeKey",
  "volumeMountPath",
]);
const INT_FIELDS = [
  "gpuCount",
  "containerDiskInGb",
  "volumeInGb",
  "minVcpuCount",
  "minMemoryInGb",
  "minDisk",
  "minDownload",
  "minUpload",
  "port",
];
const STRING_FIELDS = [
  "gpuTypeId",
  "imageName",
  "name",
  "ports",
  "dockerArgs",
  "dataCenterId",
  "countryCode",
  "templateId",
];

const UNAUTHORIZED = "Unauthorized";
export const BOT_USER_AGENT = /^(python-urllib|go-http-client|java\/|libwww-perl)/i;

/** An error RunPod answers with HTTP 400 (document or variable validation). */
class ValidationFailure extends Error {
  constructor(
    message: string,
    readonly code = "GRAPHQL_VALIDATION_FAILED",
  ) {
    super(message);
  }
}

/** A resolver's error: `data.<field>: null` plus an entry in `errors`, with HTTP 200. */
class FieldFailure extends Error {
  constructor(
    message: string,
    readonly code?: string,
  ) {
    super(message);
  }
}

export class RunpodFake implements FakeService {
  readonly model = new CloudModel({ now: () => Date.now() });
  /** the Ollama server on each pod, behind the proxy (its switches: download speed, pull failure, spill) */
  readonly ollama = new FakeOllama({
    ids: () => this.model.list().map((m) => m.id),
    host: (id) => {
      const m = this.model.get(id);
      if (!m) return undefined;
      const since = this.model.runningSince(id);
      const type = this.gpuTypes.find((t) => t.id === m.offerKey);
      return {
        upAt:
          since === null || this.quirks.ollamaNeverListens
            ? null
            : since + this.quirks.runtimeWithoutPortsMs + this.quirks.ollamaListenDelayMs,
        env: envOf((m.meta.env as string[] | undefined) ?? []),
        gpus: type ? { count: m.gpuCount, memoryMib: type.memoryMib } : null,
        image: typeof m.meta.imageName === "string" ? m.meta.imageName : null,
      };
    },
  });
  readonly quirks: RunpodQuirks;
  readonly faults: Record<RunpodOperation, RunpodFault[]> = {
    gpuTypes: [],
    dataCenters: [],
    deploy: [],
    pod: [],
    terminate: [],
    myself: [],
    billing: [],
  };
  /** pods whose delete answers 409 (locked; the REST document also names cluster members) */
  readonly lockedPods = new Set<string>();
  /** `${cloud}:${gpuTypeId}` or `${cloud}:${gpuTypeId}:${count}` with no stock, whatever dataCenters says */
  readonly outOfStock = new Set<string>();
  readonly requests: RecordedRunpodRequest[] = [];
  gpuTypes: FakeGpuType[] = defaultGpuTypes();
  dataCenters: FakeDataCenter[] = defaultDataCenters();
  clientBalance = 42.17;
  readonly apiKey: string;
  private readonly endpoint: URL;
  private readonly proxyHost: RegExp;

  constructor(options: { url?: string; apiKey?: string; proxyDomain?: string; quirks?: Partial<RunpodQuirks> } = {}) {
    this.endpoint = new URL(options.url ?? RUNPOD_FAKE_URL);
    this.apiKey = options.apiKey ?? RUNPOD_FAKE_KEY;
    const proxyDomain = (options.proxyDomain ?? "proxy.runpod.fake").replaceAll(".", "\\.");
    this.proxyHost = new RegExp(`^([a-z0-9]+)-(\\d+)\\.${proxyDomain}$`);
    this.quirks = { ...defaultRunpodQuirks(), ...options.quirks };
  }

  /** Queues `fault` for the next `times` requests that ask for `operation`. */
  fault(operation: RunpodOperation, fault: RunpodFault, times = 1): void {
    for (let i = 0; i < times; i++) this.faults[operation].push(fault);
  }

  /** Requests that asked for `operation`. */
  calls(operation: RunpodOperation): RecordedRunpodRequest[] {
    return this.requests.filter((r) => r.operations.includes(operation));
  }

  /** Puts a pod into the account as if someone created it (an orphan, or a stranger's pod). */
  plantPod(input: PlantPod): string {
    const type =
      this.gpuTypes.find((t) => t.id === (input.gpuTypeId ?? "NVIDIA GeForce RTX 4090")) ?? this.gpuTypes[0]!;
    const gpuCount = input.gpuCount ?? 1;
    const pod = this.model.create({
      id: podId(),
      label: input.name,
      offerKey: type.id,
      gpuCount,
      pricePerHour: round((type.securePrice ?? 0) * gpuCount),
      bootMs: input.bootMs ?? 0,
      lingerMs: input.lingerMs ?? this.quirks.lingerMs,
      ignoreTerminates: input.ignoreTerminates ?? 0,
      meta: {
        imageName: "ollama/ollama:latest",
        env: Object.entries({ OLLAMA_HOST: "0.0.0.0", ...input.env }).map(([k, v]) => `${k}=${v}`),
        ports: input.ports ?? "11434/http,22/tcp",
        dockerArgs: "",
        cloudType: "SECURE",
        dataCenterId: "EU-RO-1",
        gpuDisplayName: type.displayName,
        containerDiskInGb: 40,
        minVcpuCount: 4,
        minMemoryInGb: 16,
        volumeInGb: 0,
        terminateAfter: null,
        listedAt: input.listed === false ? Number.POSITIVE_INFINITY : 0,
      },
    });
    return pod.id;
  }

  /** The pod stops on its own: desiredStatus EXITED (or DEAD). */
  exitPod(id: string, status: "EXITED" | "DEAD" = "EXITED"): void {
    this.model.exit(id, status);
  }

  /** The pod vanishes at once: `pod: null` from now on. */
  removePod(id: string): void {
    this.model.remove(id);
  }

  /** Sets what dataCenters reports for a type in one DC. */
  setStock(
    gpuTypeId: string,
    dataCenterId: string,
    stockStatus: string | null,
    available = stockStatus !== null && stockStatus !== "None",
  ): void {
    const dc = this.dataCenters.find((d) => d.id === dataCenterId);
    if (!dc) throw new Error(`no data centre ${dataCenterId}`);
    dc.gpuAvailability ??= [];
    const entry = dc.gpuAvailability.find((a) => a.gpuTypeId === gpuTypeId);
    const displayName = this.gpuTypes.find((t) => t.id === gpuTypeId)?.displayName ?? gpuTypeId;
    if (entry) Object.assign(entry, { available, stockStatus });
    else dc.gpuAvailability.push({ gpuTypeId, displayName, available, stockStatus });
  }

  /** The pod as the API would show it now (every field), or null. */
  podView(id: string): Record<string, unknown> | null {
    const m = this.model.get(id);
    return m ? this.renderPod(m) : null;
  }

  handles(url: URL): boolean {
    return (
      (url.host === this.endpoint.host &&
        (url.pathname === this.endpoint.pathname || url.pathname.startsWith("/v2/"))) ||
      this.proxyHost.test(url.hostname)
    );
  }

  /** Stock of a type in one cloud for one GPU count: what both transports' creates honour. */
  stockIn(gpuTypeId: string, cloud: "SECURE" | "COMMUNITY", count: number): "NONE" | "LOW" | "MEDIUM" | "HIGH" {
    const type = this.gpuTypes.find((t) => t.id === gpuTypeId);
    if (!type || count > type.maxGpuCount) return "NONE";
    if ((cloud === "SECURE" ? type.securePrice : type.communityPrice) === null) return "NONE";
    if (this.outOfStock.has(`${cloud}:${gpuTypeId}`) || this.outOfStock.has(`${cloud}:${gpuTypeId}:${count}`))
      return "NONE";
    const rank = { Low: 1, Medium: 2, High: 3 } as Record<string, number>;
    let best = 0;
    for (const dc of this.dataCenters)
      for (const a of dc.gpuAvailability ?? [])
        if (a.gpuTypeId === gpuTypeId && a.available && a.stockStatus) best = Math.max(best, rank[a.stockStatus] ?? 0);
    return (["NONE", "LOW", "MEDIUM", "HIGH"] as const)[best]!;
  }

  async handle(request: Request): Promise<Response> {
    const url = new URL(request.url);
    const proxied = this.proxyHost.exec(url.hostname);
    if (proxied) return this.proxy(request, proxied[1]!, Number(proxied[2]));
    if (url.pathname.startsWith("/v2/")) return handleRest(this, request);
    const record: RecordedRunpodRequest = {
      transport: "graphql",
      url: request.url,
      method: request.method,
      userAgent: request.headers.get("user-agent"),
      authorization: request.headers.get("authorization"),
      operations: [],
      query: "",
      variables: {},
      status: 0,
    };
    this.requests.push(record);
    const response = await this.graphql(request, url, record);
    record.status = response.status;
    return response;
  }

  private async graphql(request: Request, url: URL, record: RecordedRunpodRequest): Promise<Response> {
    // docs/providers.md#runpod-user-agent: Cloudflare in front of api.runpod.io blocks requests without a (browser-ish) UA.
    const userAgent = record.userAgent ?? "";
    if (this.quirks.cloudflareBlocksBots && (userAgent.trim() === "" || BOT_USER_AGENT.test(userAgent))) {
      return text("error code: 1010", 403);
    }
    if (request.method !== "POST") return text("Method Not Allowed", 405);

    let body: { query?: unknown; variables?: unknown };
    try {
      body = (await request.json()) as typeof body;
    } catch {
      return json(
        {
          errors: [
            {
              message: "POST body missing, invalid Content-Type, or JSON object has no keys.",
              extensions: { code: "BAD_REQUEST" },
            },
          ],
        },
        400,
      );
    }
    if (typeof body.query !== "string")
      return json(
        {
          errors: [
            { message: "GraphQL operations must contain a non-empty `query`.", extensions: { code: "BAD_REQUEST" } },
          ],
        },
        400,
      );
    record.query = body.query;
    record.variables = isObject(body.variables) ? body.variables : {};

    let document: GraphqlDocument;
    try {
      document = parseDocument(body.query);
    } catch (error) {
      return json(
        {
          errors: [
            { message: `Syntax Error: ${(error as Error).message}`, extensions: { code: "GRAPHQL_PARSE_FAILED" } },
          ],
        },
        400,
      );
    }
    record.operations = document.selection
      .map((f) => ROOT_FIELDS[f.name]?.operation)
      .filter((op): op is RunpodOperation => op !== undefined);

    for (const operation of record.operations) {
      const fault = this.faults[operation].shift();
      if (fault?.kind === "unknownField") {
        const input = record.variables.input;
        const message = `Variable "$input" got invalid value ${graphqlInspect(input)}; Field "${fault.field}" is not defined by type "PodFindAndDeployOnDemandInput".`;
        return json({ errors: [{ message, extensions: { code: "BAD_USER_INPUT" } }] }, 400);
      }
      if (fault) return this.injected(fault, request);
    }

    // The key: Bearer header (current) or ?api_key= (legacy, still accepted).
    const bearer = /^Bearer\s+(.+)$/i.exec(record.authorization ?? "")?.[1]?.trim() ?? null;
    const key = bearer ?? url.searchParams.get("api_key");
    if (this.quirks.auth === "bad_key" || (key !== null && key !== this.apiKey)) {
      return json(
        { errors: [{ message: this.echo("Unauthorized request, please check your API key.", record) }] },
        401,
      );
    }

    try {
      this.validate(document, record.variables);
    } catch (error) {
      if (!(error instanceof ValidationFailure)) throw error;
      return json({ errors: [{ message: this.echo(error.message, record), extensions: { code: error.code } }] }, 400);
    }

    const data: Record<string, unknown> = {};
    const errors: Record<string, unknown>[] = [];
    let afterwards: RunpodQuirks["errorButCreated"] = null;
    for (const field of document.selection) {
      const root = ROOT_FIELDS[field.name]!;
      const responseKey = field.alias ?? field.name;
      try {
        const args = resolveArgs(field.args, record.variables);
        const value = root.resolve(this, args, key !== null);
        data[responseKey] = project(value, field.selection, root.typeName, record.variables);
        if (root.operation === "deploy" && this.quirks.errorButCreated) afterwards = this.quirks.errorButCreated;
      } catch (error) {
        if (!(error instanceof FieldFailure)) throw error;
        data[responseKey] = null;
        errors.push({
          message: this.echo(error.message, record),
          locations: [{ line: 2, column: 3 }],
          path: [responseKey],
          ...(error.code ? { extensions: { code: error.code } } : {}),
        });
      }
    }

    // docs/providers.md#runpod-ambiguous-create: the pod exists and bills, but the answer says otherwise.
    if (afterwards === "http_500") return json({ errors: [{ message: "Internal Server Error" }] }, 500);
    if (afterwards === "hang") return hang(request);
    if (afterwards === "graphql_error") {
      return json({
        errors: [
          {
            message: "Something went wrong. Please try again later or contact support.",
            path: ["podFindAndDeployOnDemand"],
            extensions: { code: "INTERNAL_SERVER_ERROR" },
          },
        ],
        data: { podFindAndDeployOnDemand: null },
      });
    }
    return json(errors.length > 0 ? { errors, data } : { data });
  }

  injected(fault: RunpodFault, request: Request): Promise<Response> | Response {
    switch (fault.kind) {
      case "unknownField":
        return text("unknownField is a GraphQL fault", 500);
      case "status":
        return text(fault.body ?? statusText(fault.status), fault.status, fault.headers);
      case "hang":
        return hang(request);
      case "malformed":
        return new Response('{"data":{"pod":', { status: 200, headers: { "Content-Type": "application/json" } });
      case "empty":
        return new Response("", { status: 200, headers: { "Content-Type": "application/json" } });
    }
  }

  private echo(message: string, record: RecordedRunpodRequest): string {
    return this.quirks.echoKeyInErrors
      ? `${message} (request had authorization: ${record.authorization ?? "none"}, url: ${record.url})`
      : message;
  }

  /** Document and variable validation, all before any resolver runs (as GraphQL does). */
  private validate(document: GraphqlDocument, variables: Record<string, unknown>): void {
    for (const field of document.selection) {
      const root = ROOT_FIELDS[field.name];
      if (!root)
        throw new ValidationFailure(
          `Cannot query field "${field.name}" on type "${document.operation === "mutation" ? "Mutation" : "Query"}".`,
        );
      if (root.kind !== document.operation)
        throw new ValidationFailure(
          `Cannot query field "${field.name}" on type "${document.operation === "mutation" ? "Mutation" : "Query"}".`,
        );
      const input = field.args.input;
      // docs/providers.md#runpod-terminate: podTerminate returns a scalar; a selection set on it is a validation error.
      if (root.typeName === "Void" && field.selection)
        throw new ValidationFailure(
          `Field "${field.name}" must not have a selection since type "Boolean" has no subfields.`,
        );
      if (root.inputType && input === undefined)
        throw new ValidationFailure(
          `Field "${field.name}" argument "input" of type "${root.inputType}" is required, but it was not provided.`,
        );
      if (input && typeof input === "object" && "variable" in input) {
        const declared = document.variableTypes[input.variable as string];
        if (!declared) throw new ValidationFailure(`Variable "$${input.variable}" is not defined.`);
        if (root.inputType && declared.replace(/!$/, "") !== root.inputType.replace(/!$/, "")) {
          throw new ValidationFailure(
            `Variable "$${input.variable}" of type "${declared}" used in position expecting type "${root.inputType}".`,
          );
        }
        if (root.inputType?.endsWith("!") && !declared.endsWith("!")) {
          throw new ValidationFailure(
            `Variable "$${input.variable}" of type "${declared}" used in position expecting type "${root.inputType}".`,
          );
        }
      }
      // Selections are checked against a fully populated sample of the type.
      project(root.sample(this), field.selection, root.typeName, variables);
      if (root.operation === "deploy" && this.quirks.strictInput)
        validateDeployInput(resolveArgs(field.args, variables).input);
    }
  }

  // ---------------------------------------------------------------- resolvers

  resolveGpuTypes(args: Record<string, unknown>): Record<string, unknown>[] {
    const filter = isObject(args.input) ? args.input : {};
    let types = this.gpuTypes;
    if (typeof filter.id === "string") types = types.filter((t) => t.id === filter.id);
    else if (Array.isArray(filter.ids)) types = types.filter((t) => (filter.ids as unknown[]).includes(t.id));
    return types.map((t) => this.withLowestPrice(t));
  }

  /** `lowestPrice(input: {gpuCount, secureCloud, ...})`: stock for one cloud and GPU count (null = none). */
  withLowestPrice(t: FakeGpuType): Record<string, unknown> {
    return {
      ...t,
      maxGpuCountSecureCloud: t.secureCloud ? t.maxGpuCount : 0,
      maxGpuCountCommunityCloud: t.communityCloud ? t.maxGpuCount : 0,
      lowestPrice: (args: Record<string, unknown>) => {
        const input = isObject(args.input) ? args.input : {};
        const cloud = input.secureCloud === false ? "COMMUNITY" : "SECURE";
        const count = typeof input.gpuCount === "number" ? input.gpuCount : 1;
        const stock = this.stockIn(t.id, cloud, count);
        const price = cloud === "SECURE" ? t.securePrice : t.communityPrice;
        const inStock = stock !== "NONE";
        return {
          minimumBidPrice: inStock && price ? round(price * 0.45) : null,
          uninterruptablePrice: inStock ? price : null,
          minVcpu: inStock ? 6 : null,
          minMemory: inStock ? 41 : null,
          stockStatus: inStock ? stock[0] + stock.slice(1).toLowerCase() : null,
          maxUnreservedGpuCount: inStock ? t.maxGpuCount : 0,
          availableGpuCounts: inStock ? Array.from({ length: t.maxGpuCount }, (_, i) => i + 1) : [],
        };
      },
    };
  }

  resolveDeploy(input: Record<string, unknown>, authenticated: boolean): Record<string, unknown> {
    if (!authenticated || this.quirks.auth === "no_permission") throw new FieldFailure(UNAUTHORIZED);
    const type = this.gpuTypes.find((t) => t.id === input.gpuTypeId);
    if (!type) throw new FieldFailure(`Could not find GPU type with id ${String(input.gpuTypeId)}`);
    const cloud = (input.cloudType as string | undefined) ?? "ALL";
    const price = cloud === "COMMUNITY" ? type.communityPrice : (type.securePrice ?? type.communityPrice);
    const gpuCount = typeof input.gpuCount === "number" ? input.gpuCount : 1;

    // docs/providers.md#runpod-no-capacity: the listing may say "High" and the create still finds nothing.
    const refusal = this.quirks.noCapacity;
    const lean = typeof input.minMemoryInGb === "number" && input.minMemoryInGb <= 15;
    if (refusal && refusal.times > 0 && !(refusal.acceptLean && lean)) {
      refusal.times -= 1;
      throw new FieldFailure(NO_CAPACITY_MESSAGES[refusal.variant], refusal.code);
    }
    // Without stock anywhere (or in a cloud the type is not in) nothing can be found.
    const stockedIn = this.dataCenters.find((dc) =>
      dc.gpuAvailability?.some(
        (a) => a.gpuTypeId === type.id && a.available && a.stockStatus && a.stockStatus !== "None",
      ),
    );
    const cloudless = cloud !== "SECURE" && cloud !== "COMMUNITY";
    if (
      !stockedIn ||
      price === null ||
      gpuCount > type.maxGpuCount ||
      (!cloudless && this.stockIn(type.id, cloud, gpuCount) === "NONE")
    )
      throw new FieldFailure(NO_CAPACITY_MESSAGES.requested);

    const env = (input.env as { key: string; value: string }[] | undefined) ?? [];
    const pod = this.model.create({
      id: podId(),
      label: (input.name as string | undefined) ?? "",
      offerKey: type.id,
      gpuCount,
      pricePerHour: round(price * gpuCount),
      bootMs: this.quirks.stuckBooting ? Number.POSITIVE_INFINITY : this.quirks.bootMs,
      lingerMs: this.quirks.lingerMs,
      ignoreTerminates: this.quirks.ignoreTerminates,
      meta: {
        imageName: input.imageName,
        // docs/providers.md#runpod-graphql-env-ports: env goes in as {key,value} objects and comes out as "KEY=value" strings.
        env: env.map((e) => `${e.key}=${e.value}`),
        ports: (input.ports as string | undefined)?.replaceAll(" ", "") ?? "",
        dockerArgs: input.dockerArgs ?? "",
        cloudType: cloud,
        dataCenterId: stockedIn.id,
        gpuDisplayName: type.displayName,
        containerDiskInGb: input.containerDiskInGb ?? 20,
        minVcpuCount: input.minVcpuCount ?? 1,
        minMemoryInGb: input.minMemoryInGb ?? 1,
        volumeInGb: input.volumeInGb ?? 0,
        // docs/providers.md#runpod-terminate-after: accepted and stored, never enforced.
        terminateAfter: input.terminateAfter ?? null,
        listedAt: Date.now() + this.quirks.listingLagMs,
      },
    });
    return this.renderPod(pod)!;
  }

  resolvePod(input: Record<string, unknown>, authenticated: boolean): Record<string, unknown> | null {
    if (!authenticated || this.quirks.auth === "no_permission") throw new FieldFailure(UNAUTHORIZED, "RUNPOD");
    const m = this.model.get(String(input.podId));
    return m ? this.renderPod(m) : null;
  }

  resolveTerminate(input: Record<string, unknown>, authenticated: boolean): null {
    if (!authenticated || this.quirks.auth === "no_permission") throw new FieldFailure(UNAUTHORIZED);
    // docs/providers.md#runpod-terminate: null on success ("accepted" and "ignored" look the same), an error when repeated.
    const outcome = this.model.terminate(String(input.podId));
    if (outcome === "already_gone")
      throw new FieldFailure("pod not found to terminate", this.quirks.notFoundCode ? "POD_NOT_FOUND" : undefined);
    return null;
  }

  resolveMyself(authenticated: boolean): Record<string, unknown> | null {
    // docs/providers.md#runpod-graphql-errors: no key is not an error, just nobody.
    if (!authenticated) return null;
    if (this.quirks.auth === "no_permission") throw new FieldFailure(UNAUTHORIZED, "RUNPOD");
    const now = Date.now();
    const pods = this.model
      .list()
      .filter((m) => (m.meta.listedAt as number) <= now)
      .map((m) => this.renderPod(m))
      .filter((p): p is Record<string, unknown> => p !== null);
    return {
      id: "user_2PyTJrLzeuwfZilRZ7JhCQDuSqo",
      email: "ops@example.com",
      clientBalance: this.clientBalance,
      currentSpendPerHr: round(
        pods.reduce((sum, p) => sum + (p.desiredStatus === "RUNNING" ? (p.costPerHr as number) : 0), 0),
      ),
      spendLimit: 80,
      underBalance: false,
      pods,
    };
  }

  // ---------------------------------------------------------------- rendering

  /** A pod in RunPod's shape, by the model's state and the quirks. */
  renderPod(m: ModelMachine): Record<string, unknown> | null {
    const state = this.model.state(m.id);
    if (state === "gone") return null;
    const now = Date.now();
    let desiredStatus = "RUNNING";
    let runtime: Record<string, unknown> | null = null;
    if (state === "terminating" && this.quirks.lingerShowsAs === "TERMINATED") desiredStatus = "TERMINATED";
    else if (state === "exited") desiredStatus = m.exitReason === "DEAD" ? "DEAD" : "EXITED";
    else {
      // booting, failed (RunPod shows a failed start as never starting), or running
      const since = this.model.runningSince(m.id);
      if (since !== null) runtime = this.runtime(m, now - since);
    }
    const uptime = runtime ? (runtime.uptimeInSeconds as number) : 0;
    const meta = m.meta;
    return {
      id: m.id,
      name: m.label ?? "",
      desiredStatus,
      costPerHr: m.pricePerHour,
      adjustedCostPerHr: m.pricePerHour,
      gpuCount: m.gpuCount,
      vcpuCount: meta.minVcpuCount,
      memoryInGb: meta.minMemoryInGb,
      volumeInGb: meta.volumeInGb,
      containerDiskInGb: meta.containerDiskInGb,
      imageName: meta.imageName,
      dockerArgs: meta.dockerArgs,
      env: meta.env,
      ports: meta.ports,
      podType: "RESERVED",
      machineId: `m${m.id.slice(0, 11)}`,
      uptimeSeconds: uptime,
      lastStatusChange: `${desiredStatus === "EXITED" || desiredStatus === "DEAD" ? "Exited by RunPod" : "Rented by User"}: ${new Date(m.exitedAt ?? m.createdAt).toUTCString()}`,
      lastStartedAt: new Date(m.createdAt).toISOString(),
      machine: {
        podHostId: `${m.id}-64410812`,
        gpuDisplayName: meta.gpuDisplayName,
        gpuTypeId: m.offerKey,
        dataCenterId: meta.dataCenterId,
        location: meta.dataCenterId,
        secureCloud: meta.cloudType !== "COMMUNITY",
      },
      runtime,
    };
  }

  runtime(m: ModelMachine, upForMs: number): Record<string, unknown> {
    const gpus = Array.from({ length: m.gpuCount }, (_, i) => ({
      id: `GPU-e0488b7e-6932-795b-a125-${String(i).padStart(12, "0")}`,
      gpuUtilPercent: 0,
      memoryUtilPercent: 3,
    }));
    const container = { cpuPercent: 1, memoryPercent: 2 };
    // docs/providers.md#runpod-readiness: runtime first appears with uptime 0 and no ports.
    if (upForMs < this.quirks.runtimeWithoutPortsMs) {
      return { uptimeInSeconds: 0, ports: this.quirks.runtimePortsMissingAs === "null" ? null : [], gpus, container };
    }
    const ports = parsePorts(m.meta.ports as string).map(({ port, type }, i) =>
      type === "http"
        ? // docs/providers.md#runpod-readiness: http ports show an internal address; only the proxy reaches them.
          { ip: `100.65.14.${155 + i}`, isIpPublic: false, privatePort: port, publicPort: 60821 + i, type }
        : this.quirks.publicIp
          ? { ip: "213.173.104.74", isIpPublic: true, privatePort: port, publicPort: 35558 + i, type }
          : { ip: `100.65.14.${155 + i}`, isIpPublic: false, privatePort: port, publicPort: 35558 + i, type },
    );
    return {
      uptimeInSeconds: Math.max(1, Math.floor((upForMs - this.quirks.runtimeWithoutPortsMs) / 1000)),
      ports,
      gpus,
      container,
    };
  }

  /** docs/providers.md#runpod-readiness: `{id}-{port}.proxy...` answers 502 until the service listens. */
  private proxy(request: Request, id: string, port: number): Promise<Response> {
    const m = this.model.get(id);
    if (!m || this.model.state(id) === "gone") return Promise.resolve(text("Not Found", 404));
    const state = this.model.state(id);
    const since = this.model.runningSince(id);
    const exposed = parsePorts(m.meta.ports as string).some((p) => p.port === port && p.type === "http");
    const listening =
      exposed &&
      port === 11434 &&
      (state === "running" || (state === "terminating" && this.quirks.lingerShowsAs === "RUNNING")) &&
      since !== null &&
      !this.quirks.ollamaNeverListens &&
      Date.now() >= since + this.quirks.runtimeWithoutPortsMs + this.quirks.ollamaListenDelayMs;
    return listening ? this.ollama.serve(request, id) : Promise.resolve(text("Bad Gateway", 502));
  }
}

// ------------------------------------------------------------------ root fields

interface RootField {
  operation: RunpodOperation;
  kind: "query" | "mutation";
  typeName: string;
  /** the declared type of the `input` argument (variable types must match) */
  inputType?: string;
  resolve(fake: RunpodFake, args: Record<string, unknown>, authenticated: boolean): unknown;
  /** a fully populated value, to validate selection sets against */
  sample(fake: RunpodFake): unknown;
}

/*
 * Pod fields as the official clients query them (runpod-python `api/queries/pods.py`, runpodctl
 * `api/pod.go` myPods): no `createdAt`, which neither asks for, so the fake refuses it like any
 * field RunPod's schema may not have (HTTP 400, "Cannot query field").
 */
const samplePod = (): Record<string, unknown> => ({
  id: "7ucb8jox3buc29",
  name: "sample",
  desiredStatus: "RUNNING",
  costPerHr: 0.69,
  adjustedCostPerHr: 0.69,
  gpuCount: 1,
  vcpuCount: 4,
  memoryInGb: 16,
  volumeInGb: 0,
  containerDiskInGb: 40,
  imageName: "ollama/ollama:latest",
  dockerArgs: "",
  env: ["A=b"],
  ports: "11434/http",
  podType: "RESERVED",
  machineId: "ohkxhsnz9mko",
  uptimeSeconds: 1,
  lastStatusChange: "Rented by User",
  lastStartedAt: "",
  machine: {
    podHostId: "x",
    gpuDisplayName: "RTX 4090",
    gpuTypeId: "x",
    dataCenterId: "EU-RO-1",
    location: "RO",
    secureCloud: true,
  },
  runtime: {
    uptimeInSeconds: 1,
    ports: [{ ip: "100.65.0.1", isIpPublic: false, privatePort: 11434, publicPort: 1, type: "http" }],
    gpus: [{ id: "GPU-x", gpuUtilPercent: 0, memoryUtilPercent: 0 }],
    container: { cpuPercent: 0, memoryPercent: 0 },
  },
});

const ROOT_FIELDS: Record<string, RootField> = {
  gpuTypes: {
    operation: "gpuTypes",
    kind: "query",
    typeName: "GpuType",
    resolve: (fake, args) => fake.resolveGpuTypes(args),
    sample: (fake) => [fake.withLowestPrice(defaultGpuTypes()[0]!)],
  },
  dataCenters: {
    operation: "dataCenters",
    kind: "query",
    typeName: "DataCenter",
    resolve: (fake) => fake.dataCenters,
    sample: () => [{ ...defaultDataCenters()[0], storageSupport: true, listed: true }],
  },
  podFindAndDeployOnDemand: {
    operation: "deploy",
    kind: "mutation",
    typeName: "Pod",
    inputType: "PodFindAndDeployOnDemandInput",
    resolve: (fake, args, authenticated) => fake.resolveDeploy(isObject(args.input) ? args.input : {}, authenticated),
    sample: samplePod,
  },
  pod: {
    operation: "pod",
    kind: "query",
    typeName: "Pod",
    inputType: "PodFilter!",
    resolve: (fake, args, authenticated) => fake.resolvePod(isObject(args.input) ? args.input : {}, authenticated),
    sample: samplePod,
  },
  podTerminate: {
    operation: "terminate",
    kind: "mutation",
    typeName: "Void",
    inputType: "PodTerminateInput!",
    resolve: (fake, args, authenticated) =>
      fake.resolveTerminate(isObject(args.input) ? args.input : {}, authenticated),
    sample: () => null,
  },
  myself: {
    operation: "myself",
    kind: "query",
    typeName: "User",
    resolve: (fake, _args, authenticated) => fake.resolveMyself(authenticated),
    sample: () => ({
      id: "user_x",
      email: "x",
      clientBalance: 1,
      currentSpendPerHr: 0,
      spendLimit: 80,
      underBalance: false,
      pods: [samplePod()],
    }),
  },
};

/**
 * graphql-js's `inspect` (src/jsutils/inspect.ts), which its variable errors quote: objects as
 * `{ key: value }`, strings JSON-quoted, nesting beyond two levels as `[Object]` / `[Array]`.
 */
function graphqlInspect(value: unknown, seen: unknown[] = []): string {
  if (typeof value === "string") return JSON.stringify(value);
  if (value === null || typeof value !== "object") return String(value);
  if (seen.length > 2) return Array.isArray(value) ? "[Array]" : "[Object]";
  const inner = [...seen, value];
  if (Array.isArray(value)) return `[${value.map((v) => graphqlInspect(v, inner)).join(", ")}]`;
  const entries = Object.entries(value).map(([k, v]) => `${k}: ${graphqlInspect(v, inner)}`);
  return entries.length ? `{ ${entries.join(", ")} }` : "{}";
}

/** docs/providers.md#runpod-graphql-errors: what RunPod checks on PodFindAndDeployOnDemandInput before deploying anything. */
function validateDeployInput(input: unknown): void {
  const where = (field: string) => `Variable "$input" got invalid value at "input.${field}"`;
  if (!isObject(input))
    throw new ValidationFailure(
      `Variable "$input" of required type "PodFindAndDeployOnDemandInput!" was not provided.`,
      "BAD_USER_INPUT",
    );
  for (const field of Object.keys(input)) {
    if (!DEPLOY_INPUT_FIELDS.has(field)) {
      throw new ValidationFailure(
        `Variable "$input" got invalid value; Field "${field}" is not defined by type "PodFindAndDeployOnDemandInput".`,
        "BAD_USER_INPUT",
      );
    }
  }
  for (const field of INT_FIELDS) {
    const value = input[field];
    if (value != null && !Number.isInteger(value))
      throw new ValidationFailure(
        `${where(field)}; Int cannot represent non-integer value: ${JSON.stringify(value)}`,
        "BAD_USER_INPUT",
      );
  }
  for (const field of STRING_FIELDS) {
    const value = input[field];
    if (value != null && typeof value !== "string")
      throw new ValidationFailure(
        `${where(field)}; String cannot represent a non string value: ${JSON.stringify(value)}`,
        "BAD_USER_INPUT",
      );
  }
  if (input.cloudType != null && !["SECURE", "COMMUNITY", "ALL"].includes(input.cloudType as string)) {
    throw new ValidationFailure(
      `${where("cloudType")}; Value ${JSON.stringify(input.cloudType)} does not exist in "CloudTypeEnum" enum.`,
      "BAD_USER_INPUT",
    );
  }
  // docs/providers.md#runpod-graphql-env-ports: env is a list of {key, value} objects, not "K=V" strings nor a map.
  if (input.env != null) {
    const env = input.env;
    if (
      !Array.isArray(env) ||
      !env.every(
        (e) => isObject(e) && typeof e.key === "string" && typeof e.value === "string" && Object.keys(e).length === 2,
      )
    ) {
      throw new ValidationFailure(
        `${where("env")}; Expected type "EnvironmentVariableInput" to be an object with string "key" and "value".`,
        "BAD_USER_INPUT",
      );
    }
  }
  if (
    input.ports != null &&
    !/^(\s*\d+\/(http|tcp|udp)\s*)(,\s*\d+\/(http|tcp|udp)\s*)*$/.test(input.ports as string)
  ) {
    throw new ValidationFailure(`${where("ports")}; ports must look like "8888/http,22/tcp"`, "BAD_USER_INPUT");
  }
  // docs/providers.md#runpod-terminate-after: the DateTime scalar takes ISO 8601, not "1h".
  for (const field of ["terminateAfter", "stopAfter"]) {
    const value = input[field];
    if (
      value != null &&
      (typeof value !== "string" || !/^\d{4}-\d\d-\d\dT\d\d:\d\d/.test(value) || Number.isNaN(Date.parse(value)))
    ) {
      throw new ValidationFailure(
        `${where(field)}; Expected type "DateTime". DateTime cannot represent an invalid date-time-string ${JSON.stringify(value)}.`,
        "BAD_USER_INPUT",
      );
    }
  }
}

// ------------------------------------------------------------------ a tiny GraphQL reader

type ArgValue = string | number | boolean | null | { variable: string } | ArgValue[] | { [key: string]: ArgValue };

interface GraphqlField {
  name: string;
  alias: string | null;
  args: Record<string, ArgValue>;
  selection: GraphqlField[] | null;
}

interface GraphqlDocument {
  operation: "query" | "mutation";
  variableTypes: Record<string, string>;
  selection: GraphqlField[];
}

const TOKEN =
  /\s+|,|#[^\n]*|("(?:\\.|[^"\\])*")|(\$[_A-Za-z][_0-9A-Za-z]*)|([_A-Za-z][_0-9A-Za-z]*)|(-?\d+(?:\.\d+)?)|([{}()[\]:!=@])/y;

type Token = { kind: "string" | "variable" | "name" | "number" | "punct"; value: string };

function tokenize(source: string): Token[] {
  const tokens: Token[] = [];
  TOKEN.lastIndex = 0;
  while (TOKEN.lastIndex < source.length) {
    const at = TOKEN.lastIndex;
    const match = TOKEN.exec(source);
    if (!match) throw new Error(`Unexpected character "${source[at]}" at ${at}`);
    const [, str, variable, name, number, punct] = match;
    if (str !== undefined) tokens.push({ kind: "string", value: str });
    else if (variable !== undefined) tokens.push({ kind: "variable", value: variable.slice(1) });
    else if (name !== undefined) tokens.push({ kind: "name", value: name });
    else if (number !== undefined) tokens.push({ kind: "number", value: number });
    else if (punct !== undefined) tokens.push({ kind: "punct", value: punct });
  }
  return tokens;
}

function parseDocument(source: string): GraphqlDocument {
  const tokens = tokenize(source);
  let i = 0;
  const peek = () => tokens[i];
  const next = () => {
    const token = tokens[i++];
    if (!token) throw new Error("Unexpected <EOF>");
    return token;
  };
  const expect = (value: string) => {
    const token = next();
    if (token.value !== value || token.kind !== "punct") throw new Error(`Expected "${value}", found "${token.value}"`);
  };
  const isPunct = (value: string) => peek()?.kind === "punct" && peek()?.value === value;

  const parseValue = (): ArgValue => {
    const token = next();
    if (token.kind === "variable") return { variable: token.value };
    if (token.kind === "string") return JSON.parse(token.value) as string;
    if (token.kind === "number") return Number(token.value);
    if (token.kind === "name")
      return token.value === "true"
        ? true
        : token.value === "false"
          ? false
          : token.value === "null"
            ? null
            : token.value;
    if (token.value === "[") {
      const list: ArgValue[] = [];
      while (!isPunct("]")) list.push(parseValue());
      expect("]");
      return list;
    }
    if (token.value === "{") {
      const object: Record<string, ArgValue> = {};
      while (!isPunct("}")) {
        const key = next();
        if (key.kind !== "name") throw new Error(`Expected Name, found "${key.value}"`);
        expect(":");
        object[key.value] = parseValue();
      }
      expect("}");
      return object;
    }
    throw new Error(`Unexpected "${token.value}"`);
  };

  const parseSelectionSet = (): GraphqlField[] => {
    expect("{");
    const fields: GraphqlField[] = [];
    while (!isPunct("}")) {
      const first = next();
      if (first.kind !== "name") throw new Error(`Expected Name, found "${first.value}"`);
      let name = first.value;
      let alias: string | null = null;
      if (isPunct(":")) {
        next();
        const real = next();
        if (real.kind !== "name") throw new Error(`Expected Name, found "${real.value}"`);
        alias = name;
        name = real.value;
      }
      const args: Record<string, ArgValue> = {};
      if (isPunct("(")) {
        next();
        while (!isPunct(")")) {
          const key = next();
          if (key.kind !== "name") throw new Error(`Expected Name, found "${key.value}"`);
          expect(":");
          args[key.value] = parseValue();
        }
        expect(")");
      }
      fields.push({ name, alias, args, selection: isPunct("{") ? parseSelectionSet() : null });
    }
    expect("}");
    return fields;
  };

  let operation: "query" | "mutation" = "query";
  const variableTypes: Record<string, string> = {};
  const head = peek();
  if (head?.kind === "name") {
    if (head.value !== "query" && head.value !== "mutation") throw new Error(`Unexpected Name "${head.value}"`);
    operation = head.value;
    next();
    if (peek()?.kind === "name") next();
    if (isPunct("(")) {
      next();
      while (!isPunct(")")) {
        const variable = next();
        if (variable.kind !== "variable") throw new Error(`Expected $variable, found "${variable.value}"`);
        expect(":");
        let type = "";
        while (!isPunct(")") && peek()?.kind !== "variable") {
          if (isPunct("=")) throw new Error("default values are not supported by this fake");
          type += next().value;
        }
        variableTypes[variable.value] = type;
      }
      expect(")");
    }
  }
  const selection = parseSelectionSet();
  if (i !== tokens.length) throw new Error(`Unexpected "${tokens[i]!.value}" after the operation`);
  return { operation, variableTypes, selection };
}

function resolveArgs(args: Record<string, ArgValue>, variables: Record<string, unknown>): Record<string, unknown> {
  const resolve = (value: ArgValue): unknown => {
    if (Array.isArray(value)) return value.map(resolve);
    if (value !== null && typeof value === "object") {
      if ("variable" in value && typeof value.variable === "string" && Object.keys(value).length === 1)
        return variables[value.variable];
      return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, resolve(v as ArgValue)]));
    }
    return value;
  };
  return Object.fromEntries(Object.entries(args).map(([k, v]) => [k, resolve(v)]));
}

/** Keeps only the selected fields, as GraphQL does; a selection RunPod would reject throws. */
function project(
  value: unknown,
  selection: GraphqlField[] | null,
  typeName: string,
  variables: Record<string, unknown> = {},
): unknown {
  if (value === null || value === undefined) return null;
  if (Array.isArray(value)) return value.map((item) => project(item, selection, typeName, variables));
  if (!isObject(value)) {
    if (selection)
      throw new ValidationFailure(`Field of type "${typeName}" must not have a selection since it has no subfields.`);
    return value;
  }
  if (!selection) throw new ValidationFailure(`Field of type "${typeName}" must have a selection of subfields.`);
  const out: Record<string, unknown> = {};
  for (const field of selection) {
    if (field.name === "__typename") {
      out[field.alias ?? field.name] = typeName;
      continue;
    }
    if (!(field.name in value))
      throw new ValidationFailure(`Cannot query field "${field.name}" on type "${typeName}".`);
    // A field with arguments (lowestPrice(input: ...)) is a function of them.
    const raw = value[field.name];
    const resolved = typeof raw === "function" ? raw(resolveArgs(field.args, variables)) : raw;
    out[field.alias ?? field.name] = project(resolved, field.selection, field.name, variables);
  }
  return out;
}

// ------------------------------------------------------------------ helpers

export function parsePorts(ports: string): { port: number; type: string }[] {
  return ports
    .split(",")
    .map((entry) => entry.trim().split("/"))
    .filter(([port, type]) => port && type && /^\d+$/.test(port))
    .map(([port, type]) => ({ port: Number(port), type: type! }));
}

export function hang(request: Request): Promise<Response> {
  return new Promise((_, reject) => {
    if (request.signal.aborted) reject(request.signal.reason);
    request.signal.addEventListener("abort", () => reject(request.signal.reason));
  });
}

export function statusText(status: number): string {
  if (status === 429) return "Too Many Requests";
  if (status === 502) return "<html><body><h1>502 Bad Gateway</h1></body></html>";
  if (status === 503) return "Service Unavailable";
  return "Internal Server Error";
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function round(value: number): number {
  return Math.round(value * 10_000) / 10_000;
}

const ID_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789";

/** 14 lowercase alphanumerics with at least one digit, like RunPod's. */
export function podId(): string {
  const bytes = crypto.getRandomValues(new Uint8Array(14));
  const id = [...bytes].map((b) => ID_ALPHABET[b % ID_ALPHABET.length]).join("");
  return /\d/.test(id) ? id : `${id.slice(0, 13)}7`;
}
