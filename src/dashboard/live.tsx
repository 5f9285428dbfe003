import type { Context } from "hono";
import { type SSEStreamingApi, streamSSE } from "hono/streaming";
import { resumeSession } from "../auth/sessions";
import { leasesWithUnresolvedCreates } from "../leases/create-records";
import { listEvents } from "../leases/ledger";
import { readSessionCookie } from "./cookie";
import { activeRows, detailView, leaseRow, recentStoppedRows, views } from "./data";
import type { DashEnv } from "./env";
import { Alarms, EventItem } from "./leases-view";
import { LeaseDetail, LeaseLists } from "./pages/leases";
import { renderHtml } from "./ui";

const POLL_MS = 1_000;
/** A stream ends after this long; EventSource reconnects on its own. */
const STREAM_MAX_MS = 5 * 60_000;

/**
 * GET /live: the dashboard's own event stream (the session cookie is its credential, which an
 * EventSource sends where it could not send an Authorization header). `?lease=ID` follows one lease
 * and its events; otherwise the leases page. A region is sent only when what it shows changed;
 * costs and time left tick in the page between messages. When the session ends (sign-out, token
 * revoked) an `ended` event sends the page to sign-in.
 */
export function liveStream(c: Context<DashEnv>) {
  const services = c.get("services");
  const leaseId = c.req.query("lease");
  const cookie = readSessionCookie(c);
  return streamSSE(c, async (stream) => {
    try {
      await follow(stream);
    } catch (error) {
      // A browser that navigates away drops the connection, and the read in flight fails with it
      // ("Network connection lost"): nothing to report. Anything else is logged; the page's
      // EventSource reconnects on its own.
      if (!stream.aborted) services.log.warn("live_stream_failed", { error });
    }
  });

  async function follow(stream: SSEStreamingApi) {
    const sent = new Map<string, string>();
    let afterSeq = Number(c.req.header("last-event-id")) || 0;
    const endAt = Date.now() + STREAM_MAX_MS;
    const send = async (event: string, target: string, html: string, signature: string) => {
      if (sent.get(target) === signature) return;
      sent.set(target, signature);
      await stream.writeSSE({ event, data: JSON.stringify({ target, html }) });
    };
    while (!stream.aborted && !stream.closed) {
      const session = await resumeSession(services, cookie);
      if (!session?.caller.scopes.some((s) => s === "read" || s === "admin")) {
        await stream.writeSSE({ event: "ended", data: "{}" });
        break;
      }
      const active = await activeRows(services);
      const unresolved = await leasesWithUnresolvedCreates(services.db);
      await send(
        "alarms",
        "alarms",
        await renderHtml(<Alarms rows={active} unresolvedIds={new Set(unresolved)} />),
        `${signatureOf(active, "alarms")}:${unresolved.join(",")}`,
      );
      if (leaseId) {
        const row = await leaseRow(services, leaseId);
        if (!row) break;
        const view = await detailView(row, services);
        const html = await renderHtml(<LeaseDetail view={view} caller={session.caller} csrf={session.csrf} />);
        await send(
          "lease",
          "lease-detail",
          html,
          `${signatureOf([row], "lease")}:${JSON.stringify(view.lease.creates)}`,
        );
        for (const event of await listEvents(services.db, row.id, afterSeq, 100)) {
          const html = await renderHtml(<EventItem event={event} />);
          await stream.writeSSE({
            event: "event",
            id: String(event.seq),
            data: JSON.stringify({ seq: event.seq, html }),
          });
          afterSeq = event.seq;
        }
      } else {
        const recent = await recentStoppedRows(services);
        const html = await renderHtml(
          <LeaseLists
            active={views(active, services)}
            recent={views(recent, services)}
            caller={session.caller}
            csrf={session.csrf}
          />,
        );
        await send("leases", "live-leases", html, signatureOf([...active, ...recent], "leases"));
      }
      if (Date.now() >= endAt) break;
      await stream.sleep(POLL_MS);
    }
  }
}

/** What a region shows apart from the ticking figures: it is re-sent only when this changes. */
function signatureOf(rows: readonly { [key: string]: unknown }[], region: string): string {
  return JSON.stringify([
    region,
    rows.map((r) => [
      r.id,
      r.status,
      r.cost,
      r.price_per_hour,
      r.error,
      r.stop_reason,
      r.access,
      r.running_at,
      r.rented_at,
      r.stopped_at,
      r.teardown_verified_at,
      r.provider,
      r.provider_ref,
      r.gpu,
    ]),
  ]);
}
