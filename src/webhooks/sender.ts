import { DurableObject } from "cloudflare:workers";
import { loadConfig } from "../config";
import { listCreates } from "../leases/create-records";
import { openInferenceKey } from "../leases/inference-key";
import { getLease, toLease } from "../leases/ledger";
import { secretsOf } from "../lib/scrub";
import { createServices, type Services } from "../services";
import { jsonBody, maskEnv, type RenderedEvent, slackBody, withoutSecrets } from "./body";
import { type AttemptOutcome, claimDue, type DueDelivery, freezeEventData, nextDueAt, recordAttempt } from "./outbox";
import { openSecret } from "./secrets";
import { signatureHeader, standardWebhookHeaders } from "./signing";

/** No answer within this long is a failed try (README § Webhooks: 10 s). */
export const ATTEMPT_TIMEOUT_MS = 10_000;
/** Deliveries one alarm claims; the rest wait for the next alarm a second later. */
const BATCH = 24;
/** At most this many requests in flight (a Worker has 6 connections). */
const PARALLEL = 6;
const USER_AGENT = "gpulease-webhooks/1";

export type Fetch = (request: Request) => Promise<Response>;

/** The event's `data`: given at enqueue, or the lease as it is now (then frozen for retries). */
async function renderData(services: Services, delivery: DueDelivery): Promise<Record<string, unknown>> {
  if (delivery.data) return JSON.parse(delivery.data) as Record<string, unknown>;
  const row = delivery.lease_id ? await getLease(services.db, delivery.lease_id) : null;
  const lease = row ? toLease(row, await listCreates(services.db, row.id)) : { id: delivery.lease_id };
  const data = { lease, detail: delivery.detail };
  return JSON.parse(await freezeEventData(services.db, delivery.event_id, JSON.stringify(data)));
}

/**
 * A schedule's model lease has nobody waiting for its rent answer: its lease.running delivery
 * to a JSON webhook carries the inference key, opened from its seal at each send and never
 * frozen into the outbox. Slack bodies are read by people in a channel, so they never do.
 */
async function inferenceKeyFor(services: Services, delivery: DueDelivery, adminToken: string): Promise<string | null> {
  if (delivery.type !== "lease.running" || delivery.format !== "json" || !delivery.lease_id) return null;
  const row = await services.db
    .prepare("SELECT inference_key_sealed FROM leases WHERE id = ? AND status IN ('provisioning', 'running')")
    .bind(delivery.lease_id)
    .first<{ inference_key_sealed: string | null }>();
  return row?.inference_key_sealed ? openInferenceKey(row.inference_key_sealed, adminToken) : null;
}

/** Builds, signs and sends one delivery; any 2xx is delivered, anything else is retried. */
async function attempt(services: Services, delivery: DueDelivery, send: Fetch, nowMs: number): Promise<AttemptOutcome> {
  const adminToken = services.config.secrets.adminToken;
  if (!adminToken) return { ok: false, statusCode: null, error: "ADMIN_TOKEN is not set: the secret cannot be opened" };
  let secret: string;
  let body: string;
  try {
    secret = await openSecret(delivery.secret, adminToken);
    const data = maskEnv(await renderData(services, delivery)) as Record<string, unknown>;
    const inferenceKey = await inferenceKeyFor(services, delivery, adminToken);
    const event: RenderedEvent = {
      id: delivery.event_id,
      type: delivery.type,
      created_at: delivery.event_created_at,
      data: inferenceKey ? { ...data, inference_key: inferenceKey } : data,
    };
    body = withoutSecrets(delivery.format === "slack" ? slackBody(event) : jsonBody(event), [
      ...secretsOf(services.config),
      secret,
    ]);
  } catch (error) {
    return { ok: false, statusCode: null, error: error instanceof Error ? error.message : String(error) };
  }
  try {
    const response = await send(
      new Request(delivery.url, {
        method: "POST",
        body,
        headers: {
          "Content-Type": "application/json",
          "User-Agent": USER_AGENT,
          "Gpulease-Event": delivery.type,
          "Gpulease-Delivery": delivery.id,
          "Gpulease-Signature": await signatureHeader(secret, body, nowMs),
          ...(await standardWebhookHeaders(secret, delivery.id, body, nowMs)),
        },
        signal: AbortSignal.timeout(ATTEMPT_TIMEOUT_MS),
        redirect: "manual",
      }),
    );
    await response.body?.cancel();
    if (response.status >= 200 && response.status < 300) return { ok: true, statusCode: response.status };
    return { ok: false, statusCode: response.status, error: `the receiver answered HTTP ${response.status}` };
  } catch (error) {
    const timedOut = error instanceof Error && (error.name === "TimeoutError" || error.name === "AbortError");
    const reason = timedOut ? `no answer within ${ATTEMPT_TIMEOUT_MS / 1000} s` : String(error);
    return { ok: false, statusCode: null, error: `request failed: ${reason}` };
  }
}

export interface SendRound {
  attempted: number;
  delivered: number;
  /** when the outbox should be looked at again (ms), or null when nothing is pending */
  nextAt: number | null;
}

/** One round of the outbox: claims what is due, sends it, records each outcome. */
export async function deliverDue(services: Services, send: Fetch): Promise<SendRound> {
  const now = services.clock();
  const due = await claimDue(services.db, now, BATCH);
  let delivered = 0;
  for (let i = 0; i < due.length; i += PARALLEL) {
    await Promise.all(
      due.slice(i, i + PARALLEL).map(async (delivery) => {
        const outcome = await attempt(services, delivery, send, now);
        if (outcome.ok) delivered++;
        await recordAttempt(services.db, delivery, outcome, services.clock());
      }),
    );
  }
  const after = services.clock();
  const pendingAt = await nextDueAt(services.db);
  // A full batch may have left more due at once: look again a second later, not in a hot loop.
  const nextAt = due.length === BATCH ? after + 1000 : pendingAt === null ? null : Math.max(pendingAt, after + 1000);
  return { attempted: due.length, delivered, nextAt };
}

/**
 * The webhook sender: one object drains the outbox from its own alarm, so a slow or dead
 * receiver only ever holds up this alarm, never a lease's keeper, a request or a cron. Pending
 * deliveries live in D1 and the alarm is durable, so a restart loses nothing.
 */
export class WebhookSender extends DurableObject<Env> {
  /** Asks for a round now (after an event was enqueued). */
  async wake(): Promise<void> {
    const now = Date.now();
    const current = await this.ctx.storage.getAlarm();
    if (current === null || current > now) await this.ctx.storage.setAlarm(now);
  }

  override async alarm(): Promise<void> {
    const services = createServices(this.env, loadConfig(this.env));
    try {
      const round = await deliverDue(services, (request) => fetch(request));
      if (round.nextAt !== null) await this.ctx.storage.setAlarm(round.nextAt);
    } catch (error) {
      // D1 failed: keep the loop alive ourselves (the rows are still pending).
      services.log.error("webhook_round_failed", { error });
      await this.ctx.storage.setAlarm(Date.now() + 30_000);
    }
  }
}
