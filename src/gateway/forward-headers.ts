/**
 * The request headers the gateway sends on to a lease's machine: an allow-list, not a deny-list,
 * so that a header the worker's edge adds later (the caller's address: `CF-Connecting-IP`,
 * `True-Client-IP`, `CF-Connecting-IPv6`, `X-Forwarded-For`, `Forwarded`; `CF-IPCountry`, …) or
 * the caller's own credentials and cookies never reach a stranger's computer. Ollama reads only
 * the body's type and what it may answer with (ollama/ollama `server/routes.go`).
 */
const FORWARDED = ["accept", "accept-encoding", "accept-language", "content-type", "content-length", "user-agent"];

export function forwardedHeaders(incoming: Headers): Headers {
  const headers = new Headers();
  for (const name of FORWARDED) {
    const value = incoming.get(name);
    if (value !== null) headers.set(name, value);
  }
  return headers;
}
