/** A caller's own request id is kept when it is this plain; anything else is replaced. */
const SANE_REQUEST_ID = /^[A-Za-z0-9._:=-]{1,128}$/;

/** The id of one request: the caller's X-Request-Id when sane, otherwise a fresh `req_<uuid>`. */
export function requestIdOf(header: string | undefined): string {
  return header && SANE_REQUEST_ID.test(header) ? header : `req_${crypto.randomUUID().replaceAll("-", "")}`;
}
