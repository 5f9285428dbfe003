// Compile-time check of the typed client (tsc -p test/e2e, part of npm run typecheck): calls
// typed from client/schema.d.ts, and an unknown path is a type error.
import { createGpuleaseClient } from "../../client/index.mjs";

const c = createGpuleaseClient({ baseUrl: "http://x", token: "t" });
const r = await c.GET("/v1/leases/{id}", { params: { path: { id: "lse_x" } } });
const s: "provisioning" | "running" | "stopping" | "stopped" | undefined = r.data?.status;
const q = await c.GET("/v1/offers", { params: { query: { gpu: "4090" } } });
q.data?.offers[0]?.price_per_hour.toFixed(2);
const e = await c.POST("/v1/leases", { body: { provider: "sim", gpu: "4090", max_minutes: 2 } });
e.error?.code;
// @ts-expect-error unknown path
await c.GET("/v1/nope");

export { s };
