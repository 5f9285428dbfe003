import { describe, expect, it } from "vitest";
import { api } from "../helpers";

interface OpenApiDoc {
  paths: Record<string, Record<string, { tags?: string[]; security?: unknown[]; responses: Record<string, unknown> }>>;
}

describe("OpenAPI document: access control", () => {
  it("documents 403 and 429 on every /v1 route but the job call-back", async () => {
    const doc = (await (await api("/openapi.json", { token: null })).json()) as OpenApiDoc;
    const operations = Object.entries(doc.paths)
      .filter(([path]) => path.startsWith("/v1/") && !path.endsWith("/done"))
      .flatMap(([path, ops]) =>
        Object.entries(ops).map(([method, op]) => [`${method.toUpperCase()} ${path}`, op] as const),
      );
    expect(operations.length).toBeGreaterThanOrEqual(3);
    for (const [where, operation] of operations) {
      expect(Object.keys(operation.responses), where).toEqual(expect.arrayContaining(["401", "403", "429"]));
    }
  });

  it("documents the token routes under the tokens tag", async () => {
    const doc = (await (await api("/openapi.json", { token: null })).json()) as OpenApiDoc;
    expect(doc.paths["/v1/tokens"]?.post?.tags).toEqual(["tokens"]);
    expect(doc.paths["/v1/tokens"]?.post?.responses).toHaveProperty("201");
    expect(doc.paths["/v1/tokens"]?.get?.tags).toEqual(["tokens"]);
    expect(doc.paths["/v1/tokens/{id}"]?.delete?.responses).toHaveProperty("404");
    expect(doc.paths["/v1/tokens/{id}"]?.delete?.security).toEqual([{ Bearer: [] }]);
  });
});
