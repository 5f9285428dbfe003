/** A JSON response, as the fakes send them. */
export function json(body: unknown, status = 200, headers: Record<string, string> = {}): Response {
  return new Response(JSON.stringify(body), {
    status,
    headers: { "Content-Type": "application/json", ...headers },
  });
}

/** Plain text, as Cloudflare fronts and rate limiters send it. */
export function text(body: string, status: number, headers: Record<string, string> = {}): Response {
  return new Response(body, { status, headers: { "Content-Type": "text/plain", ...headers } });
}

/** The next rule of an operation's fault queue, counting down its `times` (null when none). */
export function takeQueued<R extends { times: number }>(queue: R[] | undefined): R | null {
  const rule = queue?.[0];
  if (!queue || !rule) return null;
  rule.times -= 1;
  if (rule.times <= 0) queue.shift();
  return rule;
}
