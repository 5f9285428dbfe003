import { z } from "zod";

/*
 * RunPod REST v2 wire shapes, from RunPod's own OpenAPI document (docs/runpod-rest-v2.openapi.json,
 * components/schemas). Only the fields the adapter reads are declared; `.loose()` keeps the rest,
 * so a new field on RunPod's side never breaks a read. See docs/providers.md#runpod-rest-v2.
 */

/**
 * RFC 9457 problem+json (`ErrorResponse`): every REST v2 error body. Live bodies may lack `title`
 * (the recorded no-capacity 400 carries only `detail` and `status`).
 */
export const ProblemSchema = z
  .object({
    title: z.string().nullish(),
    status: z.number().int(),
    detail: z.string(),
    errors: z.array(z.string()).nullish(),
  })
  .loose();
export type Problem = z.infer<typeof ProblemSchema>;

/** `GpuType` of `GET /v2/catalog/gpus`; price and maxCount are per cloud, price per single GPU. */
export const CatalogGpuSchema = z
  .object({
    id: z.string(),
    name: z.string(),
    manufacturer: z.string(),
    memory: z.number(),
    secure: z.boolean(),
    community: z.boolean(),
    price: z.object({ secure: z.number().nullish(), community: z.number().nullish() }).loose(),
    maxCount: z.object({ secure: z.number().nullish(), community: z.number().nullish() }).loose(),
    // Present only with include=AVAILABILITY; absent means nothing is known, so no stock.
    availability: z.string().nullish(),
    dataCenters: z.array(z.object({ id: z.string(), availability: z.string() }).loose()).nullish(),
  })
  .loose();
export type CatalogGpu = z.infer<typeof CatalogGpuSchema>;

/** Entries are parsed one by one (`CatalogGpuSchema`): one odd GPU type must not empty the catalogue. */
export const CatalogSchema = z.object({ gpus: z.array(z.unknown()) }).loose();

export const RestRuntimePortSchema = z
  .object({
    private: z.number().int().nullish(),
    public: z.number().int().nullish(),
    type: z.string().nullish(),
    ip: z.string().nullish(),
  })
  .loose();

const SshEndpointSchema = z.object({ host: z.string(), port: z.number().int() }).loose();

export const RestPodSchema = z
  .object({
    id: z.string(),
    name: z.string().nullish(),
    status: z.string(),
    cost: z.number().nullish(),
    ports: z.array(z.string()).nullish(),
    createdAt: z.string().nullish(),
    startedAt: z.string().nullish(),
    locked: z.boolean().nullish(),
    ssh: z.object({ proxy: SshEndpointSchema.nullish(), direct: SshEndpointSchema.nullish() }).loose().nullish(),
    // null when the pod is not RUNNING; RunPod's own create example even shows `{}`.
    runtime: z
      .object({
        uptime: z.number().nullish(),
        ports: z.array(RestRuntimePortSchema).nullish(),
      })
      .loose()
      .nullish(),
  })
  .loose();
export type RestPod = z.infer<typeof RestPodSchema>;

/**
 * `GET /v2/pods` is paged (runpod/runpodctl `internal/api/pods_v2.go` `podV2Pagination`): another page
 * only while `hasNextPage`, asked for with `cursor=<nextCursor>`. The kept document (2.0.0) has no
 * `pagination` yet; absent, the page is the last (what runpodctl's Go zero value reads too).
 */
const PodPaginationSchema = z.object({ nextCursor: z.string().nullish(), hasNextPage: z.boolean().nullish() }).loose();

export const PodListSchema = z
  .object({ pods: z.array(RestPodSchema), pagination: PodPaginationSchema.nullish() })
  .loose();

export const BillingRecordSchema = z
  .object({
    startTime: z.string(),
    endTime: z.string(),
    podId: z.string(),
    totalAmount: z.number(),
  })
  .loose();

export const BillingSchema = z.object({ records: z.array(BillingRecordSchema) }).loose();

/**
 * A problem body as RunPod sends it: JSON that parses as `ErrorResponse` with the HTTP status in
 * it. The `application/problem+json` content type is not required: live answers may lack it. An
 * HTML page, a proxy's text or a JSON body of another shape is not RunPod's word.
 */
export function problemOf(status: number, json: unknown): Problem | null {
  const parsed = ProblemSchema.safeParse(json);
  return parsed.success && parsed.data.status === status ? parsed.data : null;
}

/**
 * RunPod's own "this pod does not exist" (runpod/runpodctl `internal/api/client_test.go`:
 * `{"detail":"pod not found","status":404,"title":"Not Found"}`). An unknown route answers a 404
 * problem body too (a base URL ending in `/v2` doubles the prefix), so the status alone is not
 * evidence that a pod is gone.
 */
export function isPodNotFound(status: number, json: unknown): boolean {
  const body = status === 404 ? problemOf(status, json) : null;
  return body !== null && /\bpod not found\b/i.test(body.detail);
}

/**
 * No capacity on create: a 400 whose detail says so. RunPod's recorded wording is "There are no
 * longer any instances available with the requested specifications. Please refresh and try
 * again."; the same variants as GraphQL's are matched (docs/providers.md#runpod-no-capacity).
 */
export function isNoCapacityDetail(detail: string): boolean {
  const text = detail.toLowerCase();
  return (
    text.includes("instances available") ||
    text.includes("not enough free gpus") ||
    text.includes("no compatible cuda host")
  );
}
