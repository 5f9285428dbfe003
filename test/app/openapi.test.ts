import { describe, expect, it } from "vitest";
import { api } from "../helpers";

interface OpenApiDoc {
  openapi: string;
  info: { title: string; version: string };
  paths: Record<string, Record<string, { security?: unknown[]; responses: Record<string, unknown> }>>;
  components: { securitySchemes: Record<string, { type: string; scheme: string }> };
}

describe("GET /openapi.json", () => {
  it("is an OpenAPI 3.1 document with bearer auth, served without a token", async () => {
    const res = await api("/openapi.json", { token: null });
    expect(res.status).toBe(200);
    const doc = (await res.json()) as OpenApiDoc;
    expect(doc.openapi).toBe("3.1.0");
    expect(doc.info.title).toBe("gpulease");
    expect(doc.components.securitySchemes.Bearer).toMatchObject({ type: "http", scheme: "bearer" });
    expect(doc.paths["/health"]?.get).toBeDefined();
  });

  it("declares bearer security and error responses on every /v1 route", async () => {
    const doc = (await (await api("/openapi.json", { token: null })).json()) as OpenApiDoc;
    const v1 = Object.entries(doc.paths).filter(([path]) => path.startsWith("/v1/"));
    for (const [path, operations] of v1) {
      for (const [method, operation] of Object.entries(operations)) {
        const where = `${method.toUpperCase()} ${path}`;
        if (path.endsWith("/done")) continue; // the job call-back uses its own token, documented on the route
        expect(operation.security, where).toEqual([{ Bearer: [] }]);
        expect(Object.keys(operation.responses), where).toEqual(expect.arrayContaining(["400", "401", "500"]));
      }
    }
  });
});
