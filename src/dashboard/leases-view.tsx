import { hasScope } from "../auth/middleware";
import type { Config } from "../config";
import type { CreateRecord } from "../leases/create-records";
import { type LeaseRow, toLease } from "../leases/ledger";
import { leaseFor, rentedByOrAdmin } from "../leases/ownership";
import { billedFrom, costCapAt, timeCapAt, timeCost } from "../leases/pricing";
import type { Lease, LeaseEvent } from "../leases/schema";
import type { Caller } from "../services";
import { duration, money } from "./format";
import { ActionsHeader, CsrfField, Empty, StatusBadge, Time } from "./ui";

/** What a lease row shows, computed at `now` from the ledger row with the keeper's own billing rules. */
export interface LeaseView {
  lease: Lease;
  /** in the lease's currency */
  costNow: number;
  /** true while the provider bills: the page script advances the cost by the price each second */
  billing: boolean;
  /** the cost cap in the lease's currency, where one is set */
  costCap: number | null;
  /** ms epoch of the first cap (time or cost) the keeper will stop at */
  capAt: number | null;
  capKind: "time" | "cost" | null;
  /** a provisioning lease is given up at this ms epoch */
  startDeadline: number | null;
  now: number;
  /** the token that rented the lease (null: the admin token or a schedule); see leases/ownership.ts */
  tokenId: string | null;
}

export function leaseView(
  row: LeaseRow,
  now: number,
  config: Config,
  creates: readonly CreateRecord[] = [],
): LeaseView {
  const active = row.status === "provisioning" || row.status === "running";
  const billing = active && billedFrom(row) !== null && Boolean(row.price_per_hour);
  const costNow = billing ? Math.max(row.cost, timeCost(row, now)) : row.cost;
  const rate = row.currency === "EUR" ? config.eurUsd : 1;
  const costCap = row.max_cost === null ? null : row.max_cost / rate;
  const timeCap = active ? timeCapAt(row) : null;
  const costCapMs = active ? costCapAt(row, 0, config.eurUsd) : null;
  let capAt: number | null = null;
  let capKind: LeaseView["capKind"] = null;
  if (timeCap !== null) [capAt, capKind] = [timeCap, "time"];
  if (costCapMs !== null && (capAt === null || costCapMs < capAt)) [capAt, capKind] = [costCapMs, "cost"];
  const startDeadline =
    row.status === "provisioning" ? Date.parse(row.created_at) + config.startTimeoutMin * 60_000 : null;
  return {
    // Only a lease's own page shows its create records (the lists do not load them).
    lease: toLease(row, creates),
    costNow: costCap === null ? costNow : Math.min(costNow, Math.max(costCap, row.cost)),
    billing,
    costCap,
    capAt,
    capKind,
    startDeadline,
    now,
    tokenId: row.token_id,
  };
}

const STOP_REASONS: Record<string, string> = {
  requested: "stopped on request",
  max_minutes: "max_minutes reached",
  max_cost: "max_cost reached",
  job_done: "the job reported done",
  start_timeout: "never started",
  budget: "budget reached",
  reaper: "stopped by the reaper",
  rent_failed: "rental failed",
  start_failed: "the model did not start",
  idle: "stopped when idle",
};

/** Why a lease stopped, in words. */
export function stopReasonText(reason: string | null): string | null {
  return reason ? (STOP_REASONS[reason] ?? reason.replace(/_/g, " ")) : null;
}

/** The figure the page script keeps ticking: its data-* attributes say from what and how fast. */
export function CostSoFar({ view }: { view: LeaseView }) {
  const { lease } = view;
  return (
    <span
      class="num"
      data-cost={String(view.costNow)}
      data-rate-h={view.billing ? String(lease.price_per_hour ?? 0) : undefined}
      data-cap={view.costCap === null ? undefined : String(view.costCap)}
      data-currency={lease.currency ?? "USD"}
    >
      {money(view.costNow, lease.currency, 4)}
    </span>
  );
}

/** Time left before the first cap, counting down in the page script. */
export function TimeLeft({ view }: { view: LeaseView }) {
  if (view.capAt !== null) {
    const left = view.capAt - view.now;
    return (
      <span>
        <span class="num" data-left-ms={String(left)}>
          {duration(left)}
        </span>{" "}
        <span class="muted small">{view.capKind === "cost" ? "to max_cost" : "to max_minutes"}</span>
      </span>
    );
  }
  if (view.startDeadline !== null) {
    return (
      <span class="muted">
        booting; given up in{" "}
        <span class="num" data-left-ms={String(view.startDeadline - view.now)}>
          {duration(view.startDeadline - view.now)}
        </span>
      </span>
    );
  }
  return <span class="muted">—</span>;
}

/** The machine's own URLs and SSH, for the token that rented the lease and admins only. */
export function AccessList({ view, caller }: { view: LeaseView; caller: Caller }) {
  const lease = leaseFor(caller, view.tokenId, view.lease);
  if (lease.status === "stopped") return <span class="muted">—</span>;
  if (!rentedByOrAdmin(caller, view.tokenId)) return <span class="muted">shown to the token that rented it</span>;
  const urls = lease.access?.urls ?? [];
  const ssh = lease.access?.ssh;
  if (!urls.length && !ssh) return <span class="muted">{lease.status === "provisioning" ? "not yet" : "—"}</span>;
  return (
    <ul class="access">
      {urls.map((url) => (
        <li>
          {/^https?:\/\//.test(url) ? (
            <a href={url} rel="noreferrer noopener" target="_blank">
              <code>{url}</code>
            </a>
          ) : (
            <code>{url}</code>
          )}{" "}
          <button type="button" class="copy" data-copy={url} aria-label={`Copy ${url}`} hidden>
            Copy
          </button>
        </li>
      ))}
      {lease.access?.openai_base_url && lease.status === "running" ? (
        <li>
          <span class="muted small">OpenAI base URL </span>
          <code>{lease.access.openai_base_url}</code>{" "}
          <button
            type="button"
            class="copy"
            data-copy={lease.access.openai_base_url}
            aria-label="Copy the OpenAI base URL"
            hidden
          >
            Copy
          </button>
        </li>
      ) : null}
      {ssh ? (
        <li>
          <code>{`ssh -p ${ssh.port} root@${ssh.host}`}</code>{" "}
          <button
            type="button"
            class="copy"
            data-copy={`ssh -p ${ssh.port} root@${ssh.host}`}
            aria-label="Copy the ssh command"
            hidden
          >
            Copy
          </button>
        </li>
      ) : null}
    </ul>
  );
}

export function StopButton({ lease, csrf, back }: { lease: Lease; csrf: string; back?: string }) {
  return (
    <form method="post" action={`/leases/${lease.id}/stop`} class="inline">
      <CsrfField csrf={csrf} />
      {back ? <input type="hidden" name="next" value={back} /> : null}
      <button type="submit" class="danger" data-focus-key={`stop-${lease.id}`}>
        Stop
      </button>
    </form>
  );
}

function Teardown({ lease }: { lease: Lease }) {
  if (lease.status !== "stopped" && lease.status !== "stopping") return null;
  if (lease.teardown_verified_at) return <span class="ok small">teardown verified</span>;
  if (lease.error === "teardown_unverified") return <span class="bad small">teardown not verified</span>;
  return <span class="muted small">verifying teardown…</span>;
}

export function LeaseName({ lease }: { lease: Lease }) {
  return (
    <>
      <a href={`/leases/${lease.id}`} class="lease-name">
        {lease.name ?? lease.gpu ?? lease.id}
      </a>
      <br />
      <code class="muted id">{lease.id}</code>
    </>
  );
}

export interface LeaseTableProps {
  views: LeaseView[];
  caller: Caller;
  csrf: string;
  caption: string;
  empty: string;
}

/** A table of leases; each row carries data-lease-id and data-status, each stop control is named "Stop". */
export function LeaseTable({ views, caller, csrf, caption, empty }: LeaseTableProps) {
  if (!views.length) return <Empty>{empty}</Empty>;
  const stoppable = (v: LeaseView) => v.lease.status === "provisioning" || v.lease.status === "running";
  const canStop = hasScope(caller, "stop") && views.some(stoppable);
  return (
    <div class="table-wrap">
      <table class="cards">
        <caption class="visually-hidden">{caption}</caption>
        <thead>
          <tr>
            <th scope="col">Lease</th>
            <th scope="col">Status</th>
            <th scope="col">Machine</th>
            <th scope="col" class="r">
              Price
            </th>
            <th scope="col" class="r">
              Cost so far
            </th>
            <th scope="col">Time left</th>
            <th scope="col">Access</th>
            {canStop ? <ActionsHeader /> : null}
          </tr>
        </thead>
        <tbody>
          {views.map((view) => {
            const { lease } = view;
            return (
              <tr data-lease-id={lease.id} data-status={lease.status}>
                <td data-label="Lease">
                  <LeaseName lease={lease} />
                </td>
                <td data-label="Status">
                  <StatusBadge status={lease.status} /> <Teardown lease={lease} />
                  {lease.stop_reason ? (
                    <span class="muted small block">{stopReasonText(lease.stop_reason)}</span>
                  ) : null}
                </td>
                <td data-label="Machine">
                  {lease.gpu_count && lease.gpu_count > 1 ? `${lease.gpu_count}× ` : ""}
                  {lease.gpu ?? "—"}
                  <span class="muted small block">{lease.provider ?? "no provider yet"}</span>
                </td>
                <td data-label="Price" class="r num">
                  {lease.price_per_hour === null ? "—" : `${money(lease.price_per_hour, lease.currency)}/h`}
                </td>
                <td data-label="Cost so far" class="r">
                  <CostSoFar view={view} />
                  {lease.max_cost !== null ? (
                    <span class="muted small block num">of {money(lease.max_cost, "USD")} max</span>
                  ) : null}
                </td>
                <td data-label="Time left">
                  <TimeLeft view={view} />
                </td>
                <td data-label="Access">
                  <AccessList view={view} caller={caller} />
                </td>
                {canStop ? (
                  <td data-label="Actions" class="actions">
                    {stoppable(view) ? <StopButton lease={lease} csrf={csrf} back="/" /> : null}
                  </td>
                ) : null}
              </tr>
            );
          })}
        </tbody>
      </table>
    </div>
  );
}

/** Unverified teardowns and unresolved rentals: a person must look at these before anything else. */
export function Alarms({ rows, unresolvedIds }: { rows: readonly LeaseRow[]; unresolvedIds: ReadonlySet<string> }) {
  const unverified = rows.filter((r) => r.status === "stopping" && r.error === "teardown_unverified");
  const unresolved = rows.filter((r) => unresolvedIds.has(r.id) && r.error !== "teardown_unverified");
  if (!unverified.length && !unresolved.length) return null;
  return (
    <section class="alarms" aria-label="Alarms">
      {unverified.map((r) => (
        <p class="alarm" role="alert">
          <strong>Teardown not verified:</strong> <a href={`/leases/${r.id}`}>{r.name ?? r.id}</a> on{" "}
          {r.provider ?? "an unknown provider"}
          {r.provider_ref ? ` (machine ${r.provider_ref})` : ""} may still be billing. Check it in the provider's
          console; gpulease keeps terminating it.
        </p>
      ))}
      {unresolved.map((r) => (
        <p class="alarm" role="alert">
          <strong>Rental unresolved:</strong> <a href={`/leases/${r.id}`}>{r.name ?? r.id}</a> — a provider did not say
          whether a create of this lease made a machine. gpulease is looking for it by label and will tear it down if it
          exists.
        </p>
      ))}
    </section>
  );
}

export function EventItem({ event }: { event: LeaseEvent }) {
  return (
    <li data-seq={String(event.seq)}>
      <Time at={event.at} /> <strong class="kind">{event.kind.replace(/_/g, " ")}</strong>
      {event.detail ? <span class="detail"> {event.detail}</span> : null}
    </li>
  );
}
