/**
 * The OpenAPI document's finishing touches, in one place so that every route file keeps only
 * its own route: a stable operationId per operation (what generated clients name their
 * methods after), the servers entry and the license.
 */

/** operationId by "METHOD /path"; routes may also set their own in createRoute. */
const operationIds: Record<string, string> = {
  "GET /health": "getHealth",
  "GET /v1/offers": "listOffers",
  "GET /v1/offer-types": "listOfferTypes",
  "POST /v1/leases": "createLease",
  "GET /v1/leases": "listLeases",
  "GET /v1/leases/{id}": "getLease",
  "POST /v1/leases/{id}/stop": "stopLease",
  "POST /v1/leases/{id}/inference-key": "rotateInferenceKey",
  "GET /v1/leases/{id}/events": "listLeaseEvents",
  "POST /v1/leases/{id}/done": "reportJobDone",
  "POST /v1/leases/stop-all": "stopAll",
  "POST /v1/schedules": "createSchedule",
  "GET /v1/schedules": "listSchedules",
  "GET /v1/schedules/{id}": "getSchedule",
  "PATCH /v1/schedules/{id}": "updateSchedule",
  "DELETE /v1/schedules/{id}": "deleteSchedule",
  "POST /v1/schedules/{id}/run": "runSchedule",
  "GET /v1/schedules/{id}/runs": "listScheduleRuns",
  "GET /v1/reaper/runs": "listReaperRuns",
  "GET /v1/account": "getAccount",
  "POST /v1/endpoints": "createEndpoint",
  "GET /v1/endpoints": "listEndpoints",
  "GET /v1/endpoints/{name}": "getEndpoint",
  "PATCH /v1/endpoints/{name}": "updateEndpoint",
  "DELETE /v1/endpoints/{name}": "deleteEndpoint",
  "POST /v1/endpoints/{name}/keys": "rotateEndpointKey",
  "POST /v1/tokens": "createToken",
  "GET /v1/tokens": "listTokens",
  "DELETE /v1/tokens/{id}": "revokeToken",
  "GET /v1/sim": "getSimState",
  "PUT /v1/sim/config": "configureSim",
  "POST /v1/sim/reset": "resetSim",
  "POST /v1/sim/machines": "plantSimMachine",
  "DELETE /v1/sim/machines/{ref}": "removeSimMachine",
  "POST /v1/sim/machines/{ref}/exit": "exitSimMachine",
};

const methods = ["get", "put", "post", "delete", "patch", "head", "options"] as const;

/** A name for a route nobody named yet: method plus path words, e.g. postV1FooBar. */
function fallbackId(method: string, path: string): string {
  const words = path
    .split(/[^A-Za-z0-9]+/)
    .filter(Boolean)
    .map((w) => w[0]?.toUpperCase() + w.slice(1));
  return method + words.join("");
}

type Operation = { operationId?: string };
type Paths = Record<string, Partial<Record<(typeof methods)[number], Operation>>>;

/** Adds what the generator leaves out; returns the same document. */
export function finishDocument<T extends { info: object; servers?: unknown[]; paths?: object }>(doc: T): T {
  (doc.info as { license?: unknown }).license = {
    name: "UNLICENSED",
    url: "https://docs.npmjs.com/cli/configuring-npm/package-json#license",
  };
  // Relative: the worker that serves the document is the server, wherever it is deployed.
  doc.servers = [{ url: "/", description: "the worker serving this document" }];
  for (const [path, item] of Object.entries((doc.paths ?? {}) as Paths)) {
    for (const method of methods) {
      const operation = item[method];
      if (operation && !operation.operationId) {
        operation.operationId = operationIds[`${method.toUpperCase()} ${path}`] ?? fallbackId(method, path);
      }
    }
  }
  return doc;
}
