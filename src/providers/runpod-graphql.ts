import { z } from "zod";

/*
 * RunPod's GraphQL documents and the zod schemas of their answers. User data travels only in
 * `variables` (never interpolated into the query text), so a label or an env value can neither
 * break the document nor inject fields. The variable type names are RunPod's own input types.
 */

/*
 * Stock is per cloud and GPU count (gpuhunt, dstack): one lowestPrice per cloud, asked for the
 * count and the CUDA floor, rather than one dataCenters map applied to both clouds and every count
 * (docs/providers.md#runpod-graphql).
 */
export const OFFERS_QUERY = `query Offers($count: Int, $minCuda: String) {
  gpuTypes {
    id displayName manufacturer memoryInGb secureCloud communityCloud securePrice communityPrice
    maxGpuCount maxGpuCountSecureCloud maxGpuCountCommunityCloud
    secureStock: lowestPrice(input: {gpuCount: $count, secureCloud: true, minCudaVersion: $minCuda}) { stockStatus }
    communityStock: lowestPrice(input: {gpuCount: $count, secureCloud: false, minCudaVersion: $minCuda}) { stockStatus }
  }
}`;

export const DEPLOY_MUTATION = `mutation Deploy($input: PodFindAndDeployOnDemandInput!) {
  podFindAndDeployOnDemand(input: $input) { id name desiredStatus costPerHr }
}`;

const POD_FIELDS = `id name desiredStatus costPerHr ports lastStatusChange
    runtime { uptimeInSeconds ports { ip isIpPublic privatePort publicPort type } }`;

export const POD_QUERY = `query Pod($input: PodFilter!) {
  pod(input: $input) { ${POD_FIELDS} }
}`;

// podTerminate returns a scalar: a selection set on it is a validation error (HTTP 400).
export const TERMINATE_MUTATION = `mutation Terminate($input: PodTerminateInput!) {
  podTerminate(input: $input)
}`;

// Only fields the official clients ask on myself.pods (runpod/runpod-python `api/queries/pods.py`, runpod/runpodctl
// api/pod.go): one field the schema lacks fails every lookup with a 400. No createdAt among them.
export const MY_PODS_QUERY = `query MyPods {
  myself { id pods { ${POD_FIELDS} } }
}`;

export const BALANCE_QUERY = `query Balance {
  myself { id clientBalance }
}`;

export const GraphqlErrorSchema = z.object({
  message: z.string(),
  path: z.array(z.union([z.string(), z.number()])).optional(),
  extensions: z.object({ code: z.string().optional() }).loose().nullish(),
});
export type GraphqlError = z.infer<typeof GraphqlErrorSchema>;

/** Every GraphQL answer, HTTP 200 or 400: `data` and/or `errors`. */
export const GraphqlEnvelopeSchema = z
  .object({
    data: z.record(z.string(), z.unknown()).nullish(),
    errors: z.array(GraphqlErrorSchema).nullish(),
  })
  .refine((body) => body.data !== undefined || body.errors !== undefined, "neither data nor errors");

export const GpuTypeSchema = z.object({
  id: z.string(),
  displayName: z.string(),
  manufacturer: z.string().nullish(),
  memoryInGb: z.number().nullish(),
  secureCloud: z.boolean().nullish(),
  communityCloud: z.boolean().nullish(),
  securePrice: z.number().nullish(),
  communityPrice: z.number().nullish(),
  maxGpuCount: z.number().nullish(),
  maxGpuCountSecureCloud: z.number().nullish(),
  maxGpuCountCommunityCloud: z.number().nullish(),
  secureStock: z.object({ stockStatus: z.string().nullish() }).nullish(),
  communityStock: z.object({ stockStatus: z.string().nullish() }).nullish(),
});

export const OffersDataSchema = z.object({ gpuTypes: z.array(GpuTypeSchema) });

export const DeployDataSchema = z.object({
  podFindAndDeployOnDemand: z
    .object({
      id: z.string().nullish(),
      costPerHr: z.number().nullish(),
    })
    .nullish(),
});

export const RuntimePortSchema = z.object({
  ip: z.string().nullish(),
  isIpPublic: z.boolean().nullish(),
  privatePort: z.number().int(),
  publicPort: z.number().int().nullish(),
  type: z.string().nullish(),
});

export const PodSchema = z.object({
  id: z.string(),
  name: z.string().nullish(),
  desiredStatus: z.string().nullish(),
  costPerHr: z.number().nullish(),
  ports: z.string().nullish(),
  lastStatusChange: z.string().nullish(),
  runtime: z
    .object({
      uptimeInSeconds: z.number().nullish(),
      ports: z.array(RuntimePortSchema).nullish(),
    })
    .nullish(),
});
export type Pod = z.infer<typeof PodSchema>;

export const PodDataSchema = z.object({ pod: PodSchema.nullable() });

export const MyPodsDataSchema = z.object({
  myself: z.object({ pods: z.array(PodSchema).nullish() }).nullable(),
});

export const BalanceDataSchema = z.object({
  myself: z.object({ clientBalance: z.number() }).nullable(),
});

export const TerminateDataSchema = z.object({ podTerminate: z.unknown() }).nullish();

/**
 * No capacity, in every wording seen: "no longer any instances available with the requested /
 * request specifications", "... with enough disk space", "There are no instances available"
 * (spot), "not enough free GPUs on the host machine" (resume), "No compatible CUDA host is
 * currently available", or the SUPPLY_CONSTRAINT code an earlier client's authors reported (docs/providers.md#runpod-no-capacity).
 */
export function isNoCapacity(error: GraphqlError): boolean {
  const message = error.message.toLowerCase();
  return (
    message.includes("instances available") ||
    message.includes("not enough free gpus") ||
    message.includes("no compatible cuda host") ||
    error.extensions?.code === "SUPPLY_CONSTRAINT"
  );
}

/** podTerminate on a pod that no longer exists: already gone. */
export function isPodNotFound(error: GraphqlError): boolean {
  return error.message.toLowerCase().includes("pod not found") || error.extensions?.code === "POD_NOT_FOUND";
}

/** A key without permission: HTTP 200 with "Unauthorized" (skypilot #8411). */
export function isUnauthorized(error: GraphqlError): boolean {
  return /unauthori[sz]ed/i.test(error.message);
}

export const errorText = (errors: readonly GraphqlError[]): string => errors.map((e) => e.message.trim()).join("; ");
