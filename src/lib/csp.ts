/**
 * The worker's Content-Security-Policy for the pages it serves (the dashboard, /docs): everything
 * from this origin only, no framing, no inline script. `styleSrc` lets a page add a style nonce.
 */
export function contentSecurityPolicy(styleSrc = "'self'"): string {
  return [
    "default-src 'none'",
    "script-src 'self'",
    `style-src ${styleSrc}`,
    "img-src 'self' data:",
    "connect-src 'self'",
    "form-action 'self'",
    "frame-ancestors 'none'",
    "base-uri 'none'",
  ].join("; ");
}
