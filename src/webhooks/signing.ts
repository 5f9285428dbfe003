const encoder = new TextEncoder();

function hex(buffer: ArrayBuffer): string {
  return Array.from(new Uint8Array(buffer), (b) => b.toString(16).padStart(2, "0")).join("");
}

/** Hex HMAC-SHA256 of `message` keyed with the whole `whsec_…` string. */
export async function hmacHex(secret: string, message: string): Promise<string> {
  const key = await crypto.subtle.importKey("raw", encoder.encode(secret), { name: "HMAC", hash: "SHA-256" }, false, [
    "sign",
  ]);
  return hex(await crypto.subtle.sign("HMAC", key, encoder.encode(message)));
}

/**
 * The Gpulease-Signature header: `t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<raw body>">`.
 * The timestamp is inside the signed text, so a receiver can refuse replays of old deliveries.
 */
export async function signatureHeader(secret: string, body: string, nowMs: number): Promise<string> {
  const t = Math.floor(nowMs / 1000);
  return `t=${t},v1=${await hmacHex(secret, `${t}.${body}`)}`;
}

/** The key bytes of a `whsec_…` secret: its base64 part decoded (base64url in secrets made by earlier versions). */
function secretBytes(secret: string): Uint8Array {
  const text = secret
    .replace(/^whsec_/, "")
    .replace(/-/g, "+")
    .replace(/_/g, "/");
  return Uint8Array.from(atob(text.padEnd(Math.ceil(text.length / 4) * 4, "=")), (c) => c.charCodeAt(0));
}

/**
 * The Standard Webhooks headers (standardwebhooks.com): `webhook-signature: v1,<base64 HMAC-SHA256
 * of "<id>.<timestamp>.<body>">` keyed with the secret's decoded bytes, so receivers can verify
 * with the `standardwebhooks` libraries as they are.
 */
export async function standardWebhookHeaders(
  secret: string,
  deliveryId: string,
  body: string,
  nowMs: number,
): Promise<Record<"webhook-id" | "webhook-timestamp" | "webhook-signature", string>> {
  const timestamp = String(Math.floor(nowMs / 1000));
  const key = await crypto.subtle.importKey("raw", secretBytes(secret), { name: "HMAC", hash: "SHA-256" }, false, [
    "sign",
  ]);
  const mac = new Uint8Array(
    await crypto.subtle.sign("HMAC", key, encoder.encode(`${deliveryId}.${timestamp}.${body}`)),
  );
  let binary = "";
  for (const b of mac) binary += String.fromCharCode(b);
  return { "webhook-id": deliveryId, "webhook-timestamp": timestamp, "webhook-signature": `v1,${btoa(binary)}` };
}
