import { hasScope } from "../../auth/middleware";
import type { Lease, LeaseEvent } from "../../leases/schema";
import type { Caller } from "../../services";
import { money } from "../format";
import {
  AccessList,
  CostSoFar,
  EventItem,
  LeaseTable,
  type LeaseView,
  StopButton,
  stopReasonText,
  TimeLeft,
} from "../leases-view";
import { CsrfField, StatusBadge, Time } from "../ui";

export const STOP_ALL_PHRASE = "STOP ALL";

/** The notices an action can leave on the leases page (codes only: no text is reflected from the URL). */
const NOTICES: Record<string, string> = {
  stopping: "Stop requested. The lease shows stopped once the provider confirms the machine is gone.",
  already: "That lease was already stopping or stopped.",
  "stop-all": "Everything is being stopped. Each lease shows stopped once its teardown is verified.",
  "stop-all-unconfirmed": `Nothing was stopped: type ${STOP_ALL_PHRASE} exactly to confirm.`,
};

export function Notice({ code }: { code: string | undefined }) {
  const text = code ? NOTICES[code] : undefined;
  if (!text) return null;
  const bad = code === "stop-all-unconfirmed";
  return (
    <p class={`panel ${bad ? "panel-error" : "panel-ok"}`} role="status">
      {text}
    </p>
  );
}

/** Both live regions of the leases page: what runs now and what stopped recently. */
export function LeaseLists(props: { active: LeaseView[]; recent: LeaseView[]; caller: Caller; csrf: string }) {
  return (
    <>
      <h2>Active</h2>
      <LeaseTable
        views={props.active}
        caller={props.caller}
        csrf={props.csrf}
        caption="Active leases"
        empty="Nothing is running and nothing is being paid for. Rent a machine from the Offers page."
      />
      <h2>Recently stopped</h2>
      <LeaseTable
        views={props.recent}
        caller={props.caller}
        csrf={props.csrf}
        caption="Recently stopped leases"
        empty="No lease has stopped yet."
      />
    </>
  );
}

export function LeasesPage(props: {
  active: LeaseView[];
  recent: LeaseView[];
  caller: Caller;
  csrf: string;
  notice?: string;
  stopAll?: { leases: number; machines: number };
}) {
  return (
    <>
      <Notice code={props.notice} />
      {hasScope(props.caller, "rent") ? (
        <p>
          <a class="button primary" href="/offers">
            Rent a machine
          </a>
        </p>
      ) : null}
      <div id="live-leases">
        <LeaseLists {...props} />
      </div>
      {props.caller.scopes.includes("admin") ? (
        <section class="panel" aria-labelledby="stop-all-title">
          <h2 id="stop-all-title">Stop everything</h2>
          <p>
            Stops every active lease and every machine at any provider that carries gpulease's label, including ones the
            ledger does not know.
          </p>
          <form method="post" action="/stop-all" class="stack" data-confirm-phrase={STOP_ALL_PHRASE}>
            <CsrfField csrf={props.csrf} />
            <div>
              <label for="confirm">
                Type <code>{STOP_ALL_PHRASE}</code> to confirm
              </label>
              <input id="confirm" name="confirm" autocomplete="off" required />
            </div>
            <div>
              <button type="submit" class="danger">
                Stop everything
              </button>
            </div>
          </form>
        </section>
      ) : null}
    </>
  );
}

/** The facts of one lease: the live region of its page. */
export function LeaseDetail({ view, caller, csrf }: { view: LeaseView; caller: Caller; csrf: string }) {
  const { lease } = view;
  const stoppable = lease.status === "provisioning" || lease.status === "running";
  return (
    <div class="panel" data-lease-id={lease.id} data-status={lease.status}>
      <dl class="facts">
        <dt>Status</dt>
        <dd>
          <StatusBadge status={lease.status} />
          {lease.stop_reason ? <span class="muted"> {stopReasonText(lease.stop_reason)}</span> : null}
        </dd>
        <dt>Teardown</dt>
        <dd>
          {lease.teardown_verified_at ? (
            <span class="ok">
              verified <Time at={lease.teardown_verified_at} />
            </span>
          ) : lease.error === "teardown_unverified" ? (
            <span class="bad">not verified: check the provider's console</span>
          ) : lease.status === "stopping" || lease.status === "stopped" ? (
            <span class="muted">verifying…</span>
          ) : (
            <span class="muted">—</span>
          )}
        </dd>
        <dt>Machine</dt>
        <dd>
          {lease.gpu_count && lease.gpu_count > 1 ? `${lease.gpu_count}× ` : ""}
          {lease.gpu ?? "—"} at {lease.provider ?? "—"}
          {lease.provider_ref ? <code class="muted small"> {lease.provider_ref}</code> : null}
        </dd>
        {lease.model ? (
          <>
            <dt>Model</dt>
            <dd>
              <code>{lease.model.name}</code>{" "}
              <span class="muted small">
                {lease.model.weights_gb} GB
                {lease.model.vram_need_gb !== null ? `, needs ${lease.model.vram_need_gb} GB of GPU memory` : ""}
                {lease.model.context_length !== null ? ` at ${lease.model.context_length} tokens of context` : ""}
                {lease.model.loaded_at
                  ? ", loaded and answering"
                  : lease.status === "provisioning"
                    ? ", coming up"
                    : ""}
              </span>
            </dd>
          </>
        ) : null}
        {lease.endpoint ? (
          <>
            <dt>Endpoint</dt>
            <dd>
              <a href={`/endpoints#endpoint-${lease.endpoint}`}>{lease.endpoint}</a>{" "}
              <span class="muted small">a replica of this model endpoint</span>
            </dd>
          </>
        ) : null}
        {lease.usage ? (
          <>
            <dt>Usage</dt>
            <dd>
              {lease.usage.requests} requests through the gateway
              {lease.usage.errors ? ` (${lease.usage.errors} failed)` : ""}, {lease.usage.prompt_tokens} +{" "}
              {lease.usage.completion_tokens} tokens
              <span class="muted small">
                {lease.usage.decode_tokens_per_s !== null ? ` · ${lease.usage.decode_tokens_per_s} tokens/s` : ""}
                {lease.usage.first_token_ms !== null ? ` · first token ${lease.usage.first_token_ms} ms` : ""}
                {lease.usage.usd_per_million_tokens !== null
                  ? ` · ${lease.usage.usd_per_million_tokens} USD per million tokens`
                  : ""}
              </span>
            </dd>
          </>
        ) : null}
        <dt>Price</dt>
        <dd class="num">{lease.price_per_hour === null ? "—" : `${money(lease.price_per_hour, lease.currency)}/h`}</dd>
        <dt>Cost so far</dt>
        <dd>
          <CostSoFar view={view} />
        </dd>
        <dt>Caps</dt>
        <dd class="num">
          {lease.max_minutes} min{lease.max_cost !== null ? ` · ${money(lease.max_cost, "USD")}` : ""}
        </dd>
        <dt>Time left</dt>
        <dd>
          <TimeLeft view={view} />
        </dd>
        <dt>Asked for</dt>
        <dd>
          <SpecSummary spec={lease.spec} />
        </dd>
        <dt>Access</dt>
        <dd>
          <AccessList view={view} caller={caller} />
        </dd>
        <dt>Created</dt>
        <dd>
          <Time at={lease.created_at} />
        </dd>
        <dt>Running since</dt>
        <dd>
          <Time at={lease.running_at} />
        </dd>
        <dt>Stopped</dt>
        <dd>
          <Time at={lease.stopped_at} />
        </dd>
        {lease.error ? (
          <>
            <dt>Error</dt>
            <dd class="bad">{lease.error}</dd>
          </>
        ) : null}
        {lease.creates.length ? (
          <>
            <dt>Creates</dt>
            <dd>
              <CreateList creates={lease.creates} current={lease.provider_ref} />
            </dd>
          </>
        ) : null}
      </dl>
      {stoppable && hasScope(caller, "stop") ? (
        <p>
          <StopButton lease={lease} csrf={csrf} />
        </p>
      ) : null}
    </div>
  );
}

/** What the lease asked for: image, command, ports, disk, and its env by name only (values are write-only). */
function SpecSummary({ spec }: { spec: Lease["spec"] }) {
  const env = Object.keys(spec.env);
  return (
    <ul class="spec">
      <li>
        {spec.template === "ollama" ? "Ollama server" : "custom image"}
        {spec.image ? (
          <>
            {" "}
            <code class="small">{spec.image}</code>
          </>
        ) : null}
      </li>
      {spec.cmd ? (
        <li>
          command <code class="small">{spec.cmd}</code>
        </li>
      ) : null}
      <li class="muted small">
        {spec.ports.length ? `ports ${spec.ports.join(", ")} · ` : ""}
        {spec.disk_gb} GB disk
        {env.length ? ` · env ${env.map((name) => `${name}=***`).join(" ")}` : ""}
      </li>
    </ul>
  );
}

/** Every create sent for the lease, with what became of it: an unresolved one may still bill. */
function CreateList({ creates, current }: { creates: Lease["creates"]; current: string | null }) {
  return (
    <ol class="creates">
      {creates.map((c) => (
        <li>
          <code class="small">{c.offer_id}</code>{" "}
          {c.resolution === "machine" ? (
            <span>
              → machine <code class="small">{c.provider_ref}</code>
              {c.provider_ref === current ? (
                <span class="muted"> (the lease's)</span>
              ) : (
                <span class="muted"> (torn down too)</span>
              )}
            </span>
          ) : c.resolution === "none" ? (
            <span class="muted">→ no machine</span>
          ) : (
            <span class="bad">→ unresolved: gpulease is looking for its machine</span>
          )}{" "}
          <span class="muted small">
            sent <Time at={c.sent_at} />
          </span>
        </li>
      ))}
    </ol>
  );
}

export function LeasePage(props: {
  view: LeaseView;
  events: LeaseEvent[];
  caller: Caller;
  csrf: string;
  notice?: string;
}) {
  return (
    <>
      <Notice code={props.notice} />
      <div id="lease-detail">
        <LeaseDetail view={props.view} caller={props.caller} csrf={props.csrf} />
      </div>
      <h2>Events</h2>
      {props.events.length ? null : (
        <p class="empty" id="events-empty">
          No events yet: they appear here as the keeper records them.
        </p>
      )}
      <ol class="events panel" id="events" aria-live="polite">
        {props.events.map((event) => (
          <EventItem event={event} />
        ))}
      </ol>
    </>
  );
}
