import { env } from "cloudflare:workers";
import { beforeEach, describe, expect, it } from "vitest";
import { createApp } from "../../src/app";
import { ADMIN_TOKEN, api, errorBody } from "../helpers";

interface SimMachineBody {
  ref: string;
  label: string | null;
  gpu: string;
  state: string;
  shown: string;
  created_at: string;
}
interface SimStateBody {
  config: {
    boot_seconds: number;
    linger_seconds: number;
    ready_seconds: number;
    credit_usd: number;
    faults: Record<string, unknown>;
  };
  balance_usd: number;
  machines: SimMachineBody[];
}

const put = (json: unknown) => api("/v1/sim/config", { method: "PUT", json });
const plant = (json: unknown) => api("/v1/sim/machines", { method: "POST", json });
const state = async () => (await (await api("/v1/sim")).json()) as SimStateBody;

beforeEach(async () => {
  expect((await api("/v1/sim/reset", { method: "POST" })).status).toBe(200);
});

describe("GET /v1/sim and PUT /v1/sim/config", () => {
  it("shows the defaults for npm start: boot 15 s, ready 5 s later, 250 MB/s, linger 8 s, 100 USD, no faults", async () => {
    const res = await api("/v1/sim");
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({
      config: {
        boot_seconds: 15,
        linger_seconds: 8,
        ready_seconds: 5,
        download_mbs: 250,
        credit_usd: 100,
        stock_scale: 1,
        faults: {
          no_capacity: false,
          stuck_booting: false,
          fail_start: null,
          ignore_terminates: 0,
          status_error: false,
          listing_error: false,
          exit: null,
          error_but_created: false,
          pull_failure: null,
          partial_gpu: null,
        },
      },
      balance_usd: 100,
      machines: [],
    });
  });

  it("changes only the fields given and normalises fault shorthands", async () => {
    const res = await put({
      boot_seconds: 2,
      download_mbs: 40,
      faults: { no_capacity: "h100-sxm", fail_start: true, exit: true, pull_failure: true, partial_gpu: true },
    });
    expect(res.status).toBe(200);
    const { config } = (await res.json()) as SimStateBody;
    expect(config).toMatchObject({ boot_seconds: 2, linger_seconds: 8, ready_seconds: 5, download_mbs: 40 });
    expect(config.faults).toMatchObject({
      no_capacity: ["h100-sxm"],
      fail_start: expect.stringContaining("failed to start"),
      exit: { after_seconds: 0, reason: expect.any(String) },
      ignore_terminates: 0,
      pull_failure: { error: "pull model manifest: file does not exist", after_fraction: 0 },
      partial_gpu: 0.6,
    });
    await put({
      faults: {
        fail_start: false,
        pull_failure: { error: "write /root/.ollama/models/blobs: no space left on device", after_fraction: 0.4 },
        partial_gpu: 0.25,
      },
    });
    expect((await state()).config.faults).toMatchObject({
      fail_start: null,
      no_capacity: ["h100-sxm"],
      pull_failure: { error: expect.stringContaining("no space left"), after_fraction: 0.4 },
      partial_gpu: 0.25,
    });
    await put({ faults: { pull_failure: false, partial_gpu: false } });
    expect((await state()).config.faults).toMatchObject({ pull_failure: null, partial_gpu: null });
  });

  it("answers 400 naming the fields of a bad config", async () => {
    const cases: [unknown, string][] = [
      [{ boot_seconds: -1 }, "boot_seconds"],
      [{ ready_seconds: "ten" }, "ready_seconds"],
      [{ faults: { no_capacity: "rtx-9999" } }, "faults.no_capacity"],
      [{ faults: { ignore_terminates: 1.5 } }, "faults.ignore_terminates"],
      [{ faults: { exit: { after_seconds: -5 } } }, "faults.exit"],
      [{ faults: { made_up: true } }, "faults"],
      [{ download_mbs: 0 }, "download_mbs"],
      [{ faults: { partial_gpu: 1.5 } }, "faults.partial_gpu"],
      [{ faults: { pull_failure: { error: "x", after_fraction: 2 } } }, "faults.pull_failure"],
      [{ boot: 5 }, ""],
    ];
    for (const [body, path] of cases) {
      const res = await put(body);
      expect(res.status, JSON.stringify(body)).toBe(400);
      const error = await errorBody(res);
      expect(error.code).toBe("invalid_request");
      expect(
        error.issues?.some((i) => i.path.startsWith(path)),
        JSON.stringify(error.issues),
      ).toBe(true);
    }
    expect((await state()).config.boot_seconds).toBe(15); // nothing applied
  });
});

describe("planted machines", () => {
  it("plants a labelled machine (for the reaper), lists it, removes it; 404 for an unknown ref", async () => {
    const res = await plant({ label: "gpulease-lse_orphan", gpu: "l40s", age_seconds: 3600 });
    expect(res.status).toBe(201);
    const { machine } = (await res.json()) as { machine: SimMachineBody };
    expect(machine).toMatchObject({ label: "gpulease-lse_orphan", gpu: "l40s", state: "running", shown: "running" });
    expect(Date.now() - Date.parse(machine.created_at)).toBeGreaterThanOrEqual(3_600_000);

    expect((await state()).machines.map((m) => m.ref)).toEqual([machine.ref]);
    expect((await api(`/v1/sim/machines/${machine.ref}`, { method: "DELETE" })).status).toBe(200);
    expect((await state()).machines).toEqual([]);
    const again = await api(`/v1/sim/machines/${machine.ref}`, { method: "DELETE" });
    expect(again.status).toBe(404);
    expect((await errorBody(again)).code).toBe("not_found");
  });

  it("makes a machine exit on its own", async () => {
    const { machine } = (await (await plant({ label: "gpulease-lse_dies", age_seconds: 60 })).json()) as {
      machine: SimMachineBody;
    };
    const res = await api(`/v1/sim/machines/${machine.ref}/exit`, { method: "POST", json: { reason: "host lost" } });
    expect(res.status).toBe(200);
    expect((await state()).machines[0]).toMatchObject({ ref: machine.ref, state: "exited", shown: "exited" });
    expect((await api("/v1/sim/machines/sim-nosuchmachine/exit", { method: "POST" })).status).toBe(404);
  });

  it("rejects a plant without a label field or with an unknown GPU", async () => {
    expect((await plant({ gpu: "rtx-4090" })).status).toBe(400);
    expect((await plant({ label: "x", gpu: "gtx-1080" })).status).toBe(400);
  });

  it("reset removes every machine and fault", async () => {
    await plant({ label: "gpulease-lse_a" });
    await put({ faults: { listing_error: true } });
    await api("/v1/sim/reset", { method: "POST" });
    const after = await state();
    expect(after.machines).toEqual([]);
    expect(after.config.faults.listing_error).toBe(false);
  });
});

describe("access", () => {
  it("answers 403 to a token without the admin scope", async () => {
    const created = await api("/v1/tokens", {
      method: "POST",
      json: { name: "ops", scopes: ["read", "rent", "stop"] },
    });
    expect(created.status).toBe(201);
    const { token } = (await created.json()) as { token: string };
    for (const [path, method] of [
      ["/v1/sim", "GET"],
      ["/v1/sim/config", "PUT"],
      ["/v1/sim/reset", "POST"],
    ] as const) {
      const res = await api(path, { method, token, json: method === "PUT" ? { boot_seconds: 1 } : undefined });
      expect(res.status, `${method} ${path}`).toBe(403);
      expect((await errorBody(res)).code).toBe("forbidden");
    }
    expect((await state()).config.boot_seconds).toBe(15);
  });

  it("answers 401 without a token", async () => {
    expect((await api("/v1/sim", { token: null })).status).toBe(401);
  });

  it("answers 404 when the sim is off (ENABLE_SIM false)", async () => {
    const off = { ...env, ENABLE_SIM: "false" };
    const headers = { Authorization: `Bearer ${ADMIN_TOKEN}`, "Content-Type": "application/json" };
    for (const [path, method] of [
      ["/v1/sim", "GET"],
      ["/v1/sim/config", "PUT"],
      ["/v1/sim/reset", "POST"],
      ["/v1/sim/machines", "POST"],
    ] as const) {
      const res = await createApp().request(
        path,
        { method, headers, body: method === "GET" ? undefined : JSON.stringify({ label: "x" }) },
        off,
      );
      expect(res.status, `${method} ${path}`).toBe(404);
      expect((await errorBody(res)).code).toBe("not_found");
    }
  });

  it("documents the control routes in the OpenAPI document under the sim tag", async () => {
    const doc = (await (await api("/openapi.json", { token: null })).json()) as {
      paths: Record<string, Record<string, { tags?: string[] }>>;
    };
    for (const path of ["/v1/sim", "/v1/sim/config", "/v1/sim/reset", "/v1/sim/machines", "/v1/sim/machines/{ref}"]) {
      const operations = Object.values(doc.paths[path] ?? {});
      expect(operations.length, path).toBeGreaterThan(0);
      expect(
        operations.every((o) => o.tags?.includes("sim")),
        path,
      ).toBe(true);
    }
  });
});
