import { describe, expect, it } from "vitest";
import { webhookTypesFor } from "../../src/webhooks/events";
import { newWebhookSecret, openSecret, SealError, sealSecret } from "../../src/webhooks/secrets";
import { signatureHeader } from "../../src/webhooks/signing";

describe("Gpulease-Signature", () => {
  it("is t=<unix seconds>,v1=<hex HMAC-SHA256 of '<t>.<body>'> keyed with the whole whsec_ string", async () => {
    // Vector computed independently with Node: createHmac("sha256", "whsec_test").update('1700000000.{"a":1}')
    const header = await signatureHeader("whsec_test", '{"a":1}', 1_700_000_000_999);
    expect(header).toBe("t=1700000000,v1=38877139021993b830af32feea6e18a8da83eb2f6e49ee50bd9e4cf4ca4d3789");
  });

  it("changes with the body and with the time", async () => {
    const base = await signatureHeader("whsec_test", '{"a":1}', 1_700_000_000_000);
    expect(await signatureHeader("whsec_test", '{"a":2}', 1_700_000_000_000)).not.toBe(base);
    expect(await signatureHeader("whsec_test", '{"a":1}', 1_700_000_001_000)).not.toBe(base);
  });
});

describe("webhook secrets at rest", () => {
  it("are whsec_ plus 43 base64url characters, different each time", () => {
    const a = newWebhookSecret();
    expect(a).toMatch(/^whsec_[A-Za-z0-9_-]{43}$/);
    expect(newWebhookSecret()).not.toBe(a);
  });

  it("are sealed with a key from ADMIN_TOKEN: the stored text does not contain the secret and opens again", async () => {
    const secret = newWebhookSecret();
    const sealed = await sealSecret(secret, "admin-token-1");
    expect(sealed).toMatch(/^v1:/);
    expect(sealed).not.toContain(secret.slice(6));
    expect(await openSecret(sealed, "admin-token-1")).toBe(secret);
  });

  it("do not open with another ADMIN_TOKEN, and say why", async () => {
    const sealed = await sealSecret(newWebhookSecret(), "admin-token-1");
    await expect(openSecret(sealed, "admin-token-2")).rejects.toThrow(SealError);
    await expect(openSecret(sealed, "admin-token-2")).rejects.toThrow(/ADMIN_TOKEN/);
    await expect(openSecret("whsec_plain", "admin-token-1")).rejects.toThrow(/malformed/);
  });
});

describe("lease event kinds → webhook types", () => {
  it.each([
    [{ kind: "running", detail: "http://x" }, ["lease.running"]],
    [{ kind: "stop_requested", detail: "max_minutes: 30 minutes since running" }, ["lease.cap_reached"]],
    [{ kind: "stop_requested", detail: "max_cost: 3 USD reached" }, ["lease.cap_reached"]],
    [{ kind: "stop_requested", detail: "requested" }, []],
    [{ kind: "stop_requested", detail: "start_timeout: no start in 20 minutes" }, ["lease.start_failed"]],
    [{ kind: "stop_requested", detail: "rent_failed: create answer lost" }, ["lease.rent_failed"]],
    [{ kind: "stopped", detail: "the provider confirms the machine is gone" }, ["lease.stopped"]],
    [{ kind: "stopped", detail: "rent_failed: no offer could be rented" }, ["lease.rent_failed", "lease.stopped"]],
    [{ kind: "start_failed", detail: "image pull failed" }, ["lease.start_failed"]],
    [{ kind: "teardown_unverified", detail: "not confirmed gone" }, ["lease.teardown_unverified"]],
    [{ kind: "price_updated", detail: "0.69 → 0.74" }, ["lease.price_updated"]],
    [{ kind: "reaper_adopt", detail: "adopted" }, ["reaper.orphan_found"]],
    [{ kind: "booting", detail: null }, []],
    [{ kind: "terminate_sent" }, []],
  ])("%o → %o", (event, types) => {
    expect(webhookTypesFor(event)).toEqual(types);
  });
});
