/** Why a webhook URL is refused, or null when it may be used. */
export interface UrlPolicy {
  /** ALLOW_HTTP_WEBHOOKS: http:// and private/loopback hosts allowed (local development, tests) */
  allowHttp: boolean;
  /** hosts (host[:port]) of this worker: the request's own and PUBLIC_URL's */
  selfHosts: readonly string[];
}

function ipv4Parts(host: string): number[] | null {
  const parts = host.split(".");
  if (parts.length !== 4 || !parts.every((p) => /^\d{1,3}$/.test(p))) return null;
  const numbers = parts.map(Number);
  return numbers.every((n) => n <= 255) ? numbers : null;
}

function privateIpv4([a, b]: number[]): boolean {
  if (a === undefined || b === undefined) return false;
  return (
    a === 0 ||
    a === 10 ||
    a === 127 ||
    (a === 100 && b >= 64 && b <= 127) || // carrier-grade NAT
    (a === 169 && b === 254) || // link-local, cloud metadata
    (a === 172 && b >= 16 && b <= 31) ||
    (a === 192 && b === 168) ||
    a >= 224 // multicast and reserved
  );
}

function privateIpv6(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, "").toLowerCase();
  if (h === "::" || h === "::1") return true;
  // ::ffff:a.b.c.d — the WHATWG parser writes the mapped IPv4 address in hex (::ffff:7f00:1).
  const mapped = /^::ffff:([0-9a-f]{1,4}):([0-9a-f]{1,4})$/.exec(h);
  if (mapped?.[1] && mapped[2]) {
    const high = Number.parseInt(mapped[1], 16);
    const low = Number.parseInt(mapped[2], 16);
    return privateIpv4([high >> 8, high & 255, low >> 8, low & 255]);
  }
  return /^f[cd][0-9a-f]{0,2}:/.test(h) || /^fe[89ab][0-9a-f]?:/.test(h);
}

/** Names that only ever resolve inside a machine or a private network. */
function privateName(host: string): boolean {
  return host === "localhost" || /\.(localhost|local|internal|home\.arpa)$/.test(host);
}

/**
 * Checks a webhook URL: https:// (http:// only with ALLOW_HTTP_WEBHOOKS), no credentials, never
 * this worker itself (a delivery would call the API and could loop), and in production never a
 * loopback, private or link-local address. Host names are not resolved here (Workers have no
 * DNS API); Cloudflare's own fetch does not reach private networks.
 */
export function webhookUrlProblem(raw: string, policy: UrlPolicy): string | null {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return "not a valid URL";
  }
  if (url.protocol !== "https:" && !(url.protocol === "http:" && policy.allowHttp)) {
    return policy.allowHttp ? "must be an http:// or https:// URL" : "must be an https:// URL";
  }
  if (url.username || url.password) return "must not carry a user name or password";
  const host = url.hostname.toLowerCase();
  if (policy.selfHosts.map((h) => h.toLowerCase()).includes(url.host.toLowerCase())) {
    return "must not point at this worker";
  }
  if (!policy.allowHttp) {
    const v4 = ipv4Parts(host);
    if ((v4 && privateIpv4(v4)) || (host.startsWith("[") && privateIpv6(host)) || privateName(host)) {
      return "must not point at a loopback, private or link-local address";
    }
  }
  return null;
}
