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

/** The eight 16-bit groups of an address as the WHATWG parser writes it (hex, `::`, no dotted tail). */
function ipv6Groups(host: string): number[] | null {
  const h = host.replace(/^\[|\]$/g, "");
  const [head = "", tail, ...more] = h.split("::");
  if (more.length) return null;
  const parse = (part: string) => (part === "" ? [] : part.split(":").map((g) => Number.parseInt(g, 16)));
  const left = parse(head);
  const right = tail === undefined ? [] : parse(tail);
  const fill = 8 - left.length - right.length;
  if (fill < 0 || (tail === undefined && fill !== 0)) return null;
  const groups = [...left, ...Array<number>(fill).fill(0), ...right];
  return groups.every((g) => Number.isInteger(g) && g >= 0 && g <= 0xffff) ? groups : null;
}

const v4Of = (high: number, low: number) => [high >> 8, high & 255, low >> 8, low & 255];
const zero = (groups: number[]) => groups.every((g) => g === 0);

/**
 * The IPv4 addresses an IPv6 address carries, by the transition forms that route to them:
 * IPv4-compatible (::a.b.c.d, also :: and ::1), mapped (::ffff:a.b.c.d), translated
 * (::ffff:0:a.b.c.d), NAT64 (64:ff9b::/96), 6to4 (2002::/16) and Teredo (2001:0::/32: the server,
 * and the client stored inverted).
 */
function embeddedIpv4(g: number[]): number[][] {
  const [g0 = 0, g1 = 0, g2 = 0, g3 = 0, g4 = 0, g5 = 0, g6 = 0, g7 = 0] = g;
  if (zero([g0, g1, g2, g3, g4]) && (g5 === 0 || g5 === 0xffff)) return [v4Of(g6, g7)];
  if (zero([g0, g1, g2, g3]) && g4 === 0xffff && g5 === 0) return [v4Of(g6, g7)];
  if (g0 === 0x64 && g1 === 0xff9b && zero([g2, g3, g4, g5])) return [v4Of(g6, g7)];
  if (g0 === 0x2002) return [v4Of(g1, g2)];
  if (g0 === 0x2001 && g1 === 0) return [v4Of(g2, g3), v4Of(g6 ^ 0xffff, g7 ^ 0xffff)];
  return [];
}

function privateIpv6(host: string): boolean {
  const g = ipv6Groups(host);
  // An address the parser accepted but this reading cannot: refused rather than guessed at.
  if (!g) return true;
  const g0 = g[0] ?? 0;
  if (embeddedIpv4(g).some(privateIpv4)) return true;
  return (
    (g0 === 0x64 && g[1] === 0xff9b && g[2] === 1) || // local-use NAT64 (64:ff9b:1::/48)
    (g0 & 0xfe00) === 0xfc00 || // unique local
    (g0 & 0xffc0) === 0xfe80 || // link-local
    (g0 & 0xffc0) === 0xfec0 || // site-local (deprecated, still routed inside some networks)
    (g0 & 0xff00) === 0xff00 // multicast
  );
}

/** Names that only ever resolve inside a machine or a private network. */
function privateName(host: string): boolean {
  return host === "localhost" || /\.(localhost|local|internal|home\.arpa)$/.test(host);
}

/** A host name without the DNS root's trailing dot(s): `localhost.` is `localhost`. */
const withoutRootDot = (host: string) => host.toLowerCase().replace(/\.+$/, "");

/** host[:port] as a URL's host, normalised the same way on both sides of the self check. */
function hostKey(hostname: string, port: string): string {
  const name = withoutRootDot(hostname);
  return port ? `${name}:${port}` : name;
}

function selfHostKey(host: string): string {
  try {
    const url = new URL(`https://${host}`);
    return hostKey(url.hostname, url.port);
  } catch {
    return withoutRootDot(host);
  }
}

/**
 * Checks a webhook URL: https:// (http:// only with ALLOW_HTTP_WEBHOOKS), no credentials, never
 * this worker itself (a delivery would call the API and could loop), and in production never a
 * loopback, private or link-local address, however spelt: the WHATWG parser normalises IPv4
 * forms and IPv6 compression, the DNS root's trailing dot is dropped, and IPv4 addresses inside
 * IPv6 transition forms are checked as IPv4. Host names are not resolved here (Workers have no
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
  const host = withoutRootDot(url.hostname);
  if (policy.selfHosts.map(selfHostKey).includes(hostKey(url.hostname, url.port))) {
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
