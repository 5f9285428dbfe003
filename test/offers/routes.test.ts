import { describe, expect, it } from "vitest";
import { api, errorBody } from "../helpers";

describe("GET /v1/offers validation", () => {
  const bad: [query: string, field: string][] = [
    ["vram_gb=-1", "vram_gb"],
    ["vram_gb=abc", "vram_gb"],
    ["vram_gb=NaN", "vram_gb"],
    ["vram_gb=Infinity", "vram_gb"],
    ["vram_gb=1e400", "vram_gb"],
    ["vram_gb=", "vram_gb"],
    ["vram_gb=99999", "vram_gb"],
    ["weights_gb=-3", "weights_gb"],
    ["weights_gb=0x10", "weights_gb"],
    ["gpu_count=0", "gpu_count"],
    ["gpu_count=1.5", "gpu_count"],
    ["gpu_count=17", "gpu_count"],
    ["provider=aws", "provider"],
    ["provider=runpod,,vast", "provider"],
    ["provider=", "provider"],
    ["max_price=-1", "max_price"],
    ["max_price=0", "max_price"],
    ["max_price=1000000", "max_price"],
    ["limit=0", "limit"],
    ["limit=201", "limit"],
    ["limit=ten", "limit"],
    ["template=docker", "template"],
    ["gpu=%3Cscript%3E", "gpu"],
    [`gpu=${"a".repeat(65)}`, "gpu"],
    ["gpu=4090&gpu=3090", "gpu"],
  ];

  for (const [query, field] of bad) {
    it(`answers 400 naming ${field} for ${query.slice(0, 40)}`, async () => {
      const res = await api(`/v1/offers?${query}`);
      expect(res.status).toBe(400);
      const body = await errorBody(res);
      expect(body.code).toBe("invalid_request");
      expect(body.issues?.map((i) => i.path)).toContain(field);
    });
  }

  it("rejects an unknown parameter (a typo must not silently widen the search)", async () => {
    const res = await api("/v1/offers?max_prize=1");
    expect(res.status).toBe(400);
    const body = await errorBody(res);
    expect(body.code).toBe("invalid_request");
    expect(JSON.stringify(body.issues)).toContain("max_prize");
  });

  it("names every bad field at once", async () => {
    const body = await errorBody(await api("/v1/offers?vram_gb=-1&limit=500&provider=aws"));
    expect(body.issues?.map((i) => i.path).sort()).toEqual(["limit", "provider", "vram_gb"]);
  });
});

describe("GET /v1/offers access", () => {
  it("answers 401 without a token", async () => {
    for (const path of ["/v1/offers", "/v1/offer-types"]) {
      const res = await api(path, { token: null });
      expect(res.status).toBe(401);
      expect((await errorBody(res)).code).toBe("unauthorized");
    }
  });

  it("answers 403 for a token without the read scope", async () => {
    const made = await api("/v1/tokens", { method: "POST", json: { name: "offers-no-read", scopes: ["stop"] } });
    expect(made.status).toBe(201);
    const { token } = (await made.json()) as { token: string };
    const res = await api("/v1/offers", { token });
    expect(res.status).toBe(403);
    expect((await errorBody(res)).code).toBe("forbidden");
  });

  it("is documented with its query parameters, security and error responses", async () => {
    const doc = (await (await api("/openapi.json", { token: null })).json()) as {
      paths: Record<
        string,
        { get?: { parameters?: { name: string }[]; security?: unknown; responses: Record<string, unknown> } }
      >;
    };
    const offers = doc.paths["/v1/offers"]?.get;
    expect(offers?.security).toEqual([{ Bearer: [] }]);
    expect(offers?.parameters?.map((p) => p.name).sort()).toEqual(
      [
        "context_length",
        "gpu",
        "gpu_count",
        "limit",
        "disk_gb",
        "max_price",
        "model",
        "provider",
        "template",
        "vram_gb",
        "weights_gb",
      ].sort(),
    );
    expect(Object.keys(offers?.responses ?? {})).toEqual(expect.arrayContaining(["200", "400", "401", "403"]));
    expect(doc.paths["/v1/offer-types"]?.get?.security).toEqual([{ Bearer: [] }]);
  });
});
