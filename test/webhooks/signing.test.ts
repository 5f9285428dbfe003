import { Webhook } from "standardwebhooks";
import { describe, expect, it } from "vitest";
import { type LedgerEvent, type WebhookEventType, webhookTypesFor } from "../../src/webhooks/events";
import { newWebhookSecret, openSecret, SealError, sealSecret } from "../../src/webhooks/secrets";
import { signatureHeader, standardWebhookHeaders } from "../../src/webhooks/signing";

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

describe("Standard Webhooks headers", () => {
  const body = JSON.stringify({ id: "evt_1", type: "lease.stopped", data: { lease: { id: "lse_1" } } });

  it("verify with the standardwebhooks package as it is, and fail it for another body, id or secret", async () => {
    const secret = newWebhookSecret();
    const now = Date.now();
    const headers = await standardWebhookHeaders(secret, "dlv_abc", body, now);
    expect(headers["webhook-id"]).toBe("dlv_abc");
    expect(headers["webhook-timestamp"]).toBe(String(Math.floor(now / 1000)));
    expect(headers["webhook-signature"]).toMatch(/^v1,[A-Za-z0-9+/]{43}=$/);
    expect(new Webhook(secret).verify(body, headers)).toEqual(JSON.parse(body));
    expect(() => new Webhook(secret).verify(`${body} `, headers)).toThrow();
    expect(() => new Webhook(secret).verify(body, { ...headers, "webhook-id": "dlv_other" })).toThrow();
    expect(() => new Webhook(newWebhookSecret()).verify(body, headers)).toThrow();
  });

  it("match the specification's own example vector", async () => {
    // standard-webhooks spec: secret, msg_id, timestamp and payload of its README's example.
    const headers = await standardWebhookHeaders(
      "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
      "msg_p5jXN8AQM9LWM0D4loKWxJek",
      '{"test": 2432232314}',
      1_614_265_330_000,
    );
    expect(headers["webhook-signature"]).toBe("v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
  });

  it("a secret of an earlier version (base64url, no padding) still signs, keyed with its decoded bytes", async () => {
    const standard = btoa(String.fromCharCode(...new Uint8Array(32).fill(0xfb)));
    expect(standard).toMatch(/[+/].*=$/);
    const old = `whsec_${standard.replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "")}`;
    const headers = await standardWebhookHeaders(old, "dlv_1", body, Date.now());
    expect(new Webhook(`whsec_${standard}`).verify(body, headers)).toEqual(JSON.parse(body));
  });
});

describe("webhook secrets at rest", () => {
  it("are whsec_ plus 32 random bytes in standard base64, different each time", () => {
    const a = newWebhookSecret();
    expect(a).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/);
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
  it.each<[LedgerEvent, WebhookEventType[]]>([
    [{ kind: "running", detail: "http://x" }, ["lease.running"]],
    [
      { kind: "stop_requested", detail: "max_minutes: 30 minutes since running", reason: "max_minutes" },
      ["lease.cap_reached"],
    ],
    [{ kind: "stop_requested", detail: "max_cost: 3 USD reached", reason: "max_cost" }, ["lease.cap_reached"]],
    [{ kind: "stop_requested", detail: "requested", reason: "requested" }, []],
    [{ kind: "stop_requested", detail: "budget: spend reached", reason: "budget" }, []],
    [
      { kind: "stop_requested", detail: "start_timeout: no start in 20 minutes", reason: "start_timeout" },
      ["lease.start_failed"],
    ],
    [
      { kind: "stop_requested", detail: "rent_failed: create answer lost", reason: "rent_failed" },
      ["lease.rent_failed"],
    ],
    // The human detail is never parsed: a detail that reads like a cap, without the reason, is none.
    [{ kind: "stop_requested", detail: "max_cost: a user's own words" }, []],
    [{ kind: "stopped", detail: "the provider confirms the machine is gone" }, ["lease.stopped"]],
    [
      { kind: "stopped", detail: "rent_failed: no offer could be rented", reason: "rent_failed" },
      ["lease.rent_failed", "lease.stopped"],
    ],
    [{ kind: "stopped", detail: "rent_failed: but no reason" }, ["lease.stopped"]],
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
