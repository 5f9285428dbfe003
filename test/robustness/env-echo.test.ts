import { env } from "cloudflare:workers";
import { afterEach, beforeEach, describe, expect, it, type MockInstance, vi } from "vitest";
import { overlayVars } from "../../src/config";
import { scrubText } from "../../src/lib/scrub";
import { type InstalledFakes, installFakes } from "../fakes/install";
import { RunpodFake } from "../fakes/runpod";
import { api } from "../helpers";
import { TestClock } from "../support/clock";
import { driveTo } from "../support/keeper";

// A provider error that quotes the create it refused (graphql-js puts the whole variable in its
// message) must not carry the lease's own env values into the ledger, the API, events or logs.

const clock = new TestClock(Date.parse("2035-07-01T00:00:00Z"));
const SECRET_VALUE = "postgres://batch:pw-7f3e9b21@db.internal/nightly";
const OTHER_VALUE = "hf_live_q8Zt3nV1xW";
let runpod: RunpodFake;
let fakes: InstalledFakes;
const lines: string[] = [];
let spies: MockInstance[] = [];

beforeEach(() => {
  clock.install();
  overlayVars({ RUNPOD_TRANSPORT: "graphql" });
  runpod = new RunpodFake();
  fakes = installFakes(runpod);
  lines.length = 0;
  spies = (["log", "info", "warn", "error"] as const).map((method) =>
    vi.spyOn(console, method).mockImplementation((...args: unknown[]) => {
      lines.push(args.map((a) => (typeof a === "string" ? a : JSON.stringify(a))).join(" "));
    }),
  );
});

afterEach(() => {
  for (const spy of spies) spy.mockRestore();
  fakes.restore();
  overlayVars({});
});

/** A RunPod batch rental with `env`, every create refused with the whole input quoted in the message. */
function rentEchoed(env: Record<string, string>): Promise<Response> {
  runpod.fault("deploy", { kind: "unknownField", field: "supportPublicIp" }, 10);
  return api("/v1/leases", {
    method: "POST",
    json: { provider: "runpod", gpu: "4090", max_minutes: 30, template: "custom", image: "ghcr.io/you/batch:1", env },
  });
}

describe("env values echoed by a provider's error", () => {
  it("are scrubbed from the rent answer, the lease, its events, every D1 table and the logs", async () => {
    // Every create is refused with the whole input quoted in the message.
    const res = await rentEchoed({ DATABASE_URL: SECRET_VALUE, HF_TOKEN: OTHER_VALUE });
    const answer = await res.text();
    // The echo really happened: the fake quoted the env, and the ledger says a field was refused.
    const sent = runpod.requests.filter((r) => r.operations.includes("deploy"));
    expect(sent.length).toBeGreaterThan(0);
    expect(JSON.stringify(sent[0]?.variables)).toContain(SECRET_VALUE);
    expect(answer).toContain("got invalid value");
    const leaseId = (JSON.parse(answer) as { id?: string; lease_id?: string }).lease_id ?? JSON.parse(answer).id;
    if (leaseId) await driveTo(leaseId, "stopped", { clock, maxAlarms: 50 });

    const places: { where: string; text: string }[] = [
      { where: "rent answer", text: answer },
      { where: "console", text: lines.join("\n") },
    ];
    if (leaseId) {
      places.push({ where: "lease", text: await (await api(`/v1/leases/${leaseId}`)).text() });
      places.push({ where: "events", text: await (await api(`/v1/leases/${leaseId}/events`)).text() });
    }
    const tables = await env.DB.prepare(
      "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE '_cf_%' AND name NOT LIKE 'sqlite_%'",
    ).all<{ name: string }>();
    for (const { name } of tables.results) {
      if (name === "leases") {
        // The row's own spec keeps the env (it goes to the machine); everything else must not.
        const rows = await env.DB.prepare("SELECT error, attempts FROM leases").all();
        places.push({ where: "D1 leases.error/attempts", text: JSON.stringify(rows.results) });
        continue;
      }
      const rows = await env.DB.prepare(`SELECT * FROM "${name}"`).all();
      places.push({ where: `D1 ${name}`, text: JSON.stringify(rows.results) });
    }
    for (const { where, text } of places) {
      expect(text, where).not.toContain(SECRET_VALUE);
      expect(text, where).not.toContain("pw-7f3e9b21");
      expect(text, where).not.toContain(OTHER_VALUE);
    }
  });

  it("a PEM key and a service-account JSON are scrubbed in every form a provider may quote them", async () => {
    const res = await rentEchoed({ TLS_KEY: PEM_KEY, GOOGLE_APPLICATION_CREDENTIALS_JSON: SERVICE_ACCOUNT });
    const answer = await res.text();
    const leaseId = (JSON.parse(answer) as { id?: string; lease_id?: string }).lease_id ?? JSON.parse(answer).id;
    if (leaseId) await driveTo(leaseId, "stopped", { clock, maxAlarms: 50 });
    const places = [answer, lines.join("\n")];
    if (leaseId) {
      places.push(await (await api(`/v1/leases/${leaseId}`)).text());
      places.push(await (await api(`/v1/leases/${leaseId}/events`)).text());
      places.push(JSON.stringify((await env.DB.prepare("SELECT error, attempts FROM leases").all()).results));
    }
    const seen = places.join("\n");
    // The echo really happened (the provider's message names the refused input)...
    expect(answer).toContain("got invalid value");
    // ...and no piece of either value is in any place, raw or escaped.
    for (const piece of SECRET_PIECES) expect(seen, piece).not.toContain(piece);
  });

  it("scrubText hides JSON-escaped, URL-encoded and base64 forms of a secret", () => {
    const forms = [
      JSON.stringify(PEM_KEY),
      JSON.stringify(JSON.stringify(SERVICE_ACCOUNT)),
      encodeURIComponent(PEM_KEY),
      new URLSearchParams({ k: SERVICE_ACCOUNT }).toString(),
      btoa(PEM_KEY),
      btoa(SERVICE_ACCOUNT).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, ""),
    ];
    for (const form of forms) {
      const out = scrubText(`provider said: ${form}`, [PEM_KEY, SERVICE_ACCOUNT], 100_000);
      for (const piece of SECRET_PIECES) expect(out, form.slice(0, 40)).not.toContain(piece);
      expect(out).not.toContain(form.slice(20, 60));
    }
  });
});

const PEM_BODY = [
  "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7VJTUt9Us8cKj",
  "MzEfYyjiWA4R4/M2bS1GB4t7NXp98C3SC6dVMvDuictGeurT8jNbvJZHtCSuYEvu",
  "NMoSfm76oqFvAp8Gy0iz5sxjZmSnXyCdPEovGhLa0VzMaQ8s+CLOyS56YyCFGeJZ",
];
const PEM_KEY = `-----BEGIN PRIVATE KEY-----\n${PEM_BODY.join("\n")}\n-----END PRIVATE KEY-----\n`;
const SERVICE_ACCOUNT = JSON.stringify({
  type: "service_account",
  project_id: "batch-prod",
  private_key_id: "3f9a1c7e5b2d4f6a8c0e1b3d5f7a9c2e4b6d8f0a",
  private_key: PEM_KEY,
  client_email: "runner@batch-prod.iam.gserviceaccount.com",
});
/** Pieces of the two values that must appear nowhere, in any form. */
const SECRET_PIECES = [...PEM_BODY, "3f9a1c7e5b2d4f6a8c0e1b3d5f7a9c2e4b6d8f0a"];
