import { hasScope } from "../../auth/middleware";
import type { TokenRow } from "../../auth/tokens-store";
import { scopeValues } from "../../auth/tokens-store";
import type { BillingDay } from "../../billing/report";
import type { ReaperRun } from "../../reaper/runs";
import type { Schedule } from "../../schedules/schema";
import type { Caller } from "../../services";
import { money } from "../format";
import { ActionsHeader, CsrfField, Empty, Time } from "../ui";
import { SpendSection, type SpendView } from "./spend";

export function SchedulesPage(props: { schedules: Schedule[]; caller: Caller; csrf: string }) {
  if (!props.schedules.length) {
    return (
      <Empty>
        No schedules yet. Create one with <code>POST /v1/schedules</code> or <code>gpulease schedules add</code>; it
        shows here with its next run.
      </Empty>
    );
  }
  const canToggle = hasScope(props.caller, "admin");
  const canRun = hasScope(props.caller, "rent");
  return (
    <div class="table-wrap">
      <table class="cards">
        <caption class="visually-hidden">Schedules</caption>
        <thead>
          <tr>
            <th scope="col">Schedule</th>
            <th scope="col">When</th>
            <th scope="col">Next run</th>
            <th scope="col">Last run</th>
            <th scope="col">State</th>
            {canToggle || canRun ? <ActionsHeader /> : null}
          </tr>
        </thead>
        <tbody>
          {props.schedules.map((s) => (
            <tr data-schedule-id={s.id}>
              <td data-label="Schedule">
                <a class="lease-name" href={`/schedules/${s.id}`}>
                  {s.name}
                </a>
                <code class="muted id block">{s.id}</code>
              </td>
              <td data-label="When">
                <code>{s.cron}</code>
                <span class="muted small block">{s.timezone}</span>
              </td>
              <td data-label="Next run">
                {s.enabled ? <Time at={s.next_run_at} /> : <span class="muted">disabled</span>}
              </td>
              <td data-label="Last run">
                <Time at={s.last_run_at} />
                {s.last_lease_id ? (
                  <a class="small block" href={`/leases/${s.last_lease_id}`}>
                    its lease
                  </a>
                ) : null}
                {s.last_skip ? (
                  <span class="muted small block">
                    {s.last_skip.status}: {s.last_skip.detail ?? ""}
                  </span>
                ) : null}
              </td>
              <td data-label="State">
                <span class={`badge ${s.enabled ? "badge-on" : "badge-off"}`}>
                  {s.enabled ? "enabled" : "disabled"}
                </span>
              </td>
              {canToggle || canRun ? (
                <td data-label="Actions" class="actions">
                  {canToggle ? (
                    <form method="post" action={`/schedules/${s.id}/enabled`} class="inline">
                      <CsrfField csrf={props.csrf} />
                      <input type="hidden" name="enabled" value={s.enabled ? "false" : "true"} />
                      <button type="submit" aria-label={`${s.enabled ? "Disable" : "Enable"} ${s.name}`}>
                        {s.enabled ? "Disable" : "Enable"}
                      </button>
                    </form>
                  ) : null}{" "}
                  {canRun ? (
                    <form method="post" action={`/schedules/${s.id}/run`} class="inline">
                      <CsrfField csrf={props.csrf} />
                      <button type="submit" aria-label={`Run now: ${s.name}`}>
                        Run now
                      </button>
                    </form>
                  ) : null}
                </td>
              ) : null}
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}

/** What GET /v1/account answers (the fields this page shows). */
export interface AccountView {
  providers: {
    provider: string;
    configured: boolean;
    balance: number | null;
    currency: "USD" | "EUR" | null;
    error: string | null;
  }[];
  spend: { today: number; month: number; committed_today: number; committed_month: number };
  budget: { daily: number | null; monthly: number | null };
  active_leases: number;
  limits: { max_active_leases: number };
  billing: BillingDay[];
}

function BudgetCard(props: { title: string; spent: number; committed: number; budget: number | null }) {
  return (
    <div class="panel">
      <h2>{props.title}</h2>
      <p class="figure">{money(props.spent, "USD")}</p>
      <p class="muted small num">
        {money(props.committed, "USD")} including what active leases may still cost by their caps
      </p>
      {props.budget === null ? (
        <p class="muted small">No budget set (BUDGET_{props.title === "Today" ? "DAILY" : "MONTHLY"}_USD).</p>
      ) : (
        <>
          <meter
            min={0}
            max={props.budget}
            value={Math.min(props.committed, props.budget)}
            high={props.budget * 0.8}
            optimum={0}
            aria-label={`${props.title}: committed of budget`}
          ></meter>
          <p class="small num">
            {money(props.committed, "USD")} of {money(props.budget, "USD")} budget committed
          </p>
        </>
      )}
    </div>
  );
}

export function AccountPage({ account, spend }: { account: AccountView; spend: SpendView | null }) {
  return (
    <>
      <div class="cards-grid">
        <BudgetCard
          title="Today"
          spent={account.spend.today}
          committed={account.spend.committed_today}
          budget={account.budget.daily}
        />
        <BudgetCard
          title="This month"
          spent={account.spend.month}
          committed={account.spend.committed_month}
          budget={account.budget.monthly}
        />
        <div class="panel">
          <h2>Active leases</h2>
          <p class="figure">
            {account.active_leases} <span class="muted small">of {account.limits.max_active_leases} allowed</span>
          </p>
        </div>
      </div>
      <p class="muted small">Days and months are UTC; a lease running across midnight counts pro rata.</p>
      {spend ? <SpendSection spend={spend} billing={account.billing} /> : null}
      <h2>Provider balances</h2>
      <div class="table-wrap">
        <table class="cards">
          <caption class="visually-hidden">Provider balances</caption>
          <thead>
            <tr>
              <th scope="col">Provider</th>
              <th scope="col" class="r">
                Balance
              </th>
              <th scope="col">Note</th>
            </tr>
          </thead>
          <tbody>
            {account.providers.map((p) => (
              <tr>
                <td data-label="Provider">{p.provider}</td>
                <td data-label="Balance" class="r">
                  {p.balance === null ? "—" : money(p.balance, p.currency)}
                </td>
                <td data-label="Note" class={p.error ? "bad" : "muted"}>
                  {p.error ?? (p.configured ? "" : "not configured")}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
    </>
  );
}

export function ReaperPage({ runs }: { runs: ReaperRun[] }) {
  if (!runs.length) {
    return (
      <Empty>
        The reaper has not run yet. It runs every 10 minutes, compares each provider's machines with the ledger and
        tears down what nobody is paying attention to.
      </Empty>
    );
  }
  return (
    <>
      {runs.map((run) => (
        <section class="panel">
          <h2>
            <Time at={run.at} /> <span class="muted small">{run.mode}</span>
          </h2>
          <p class="small">
            {run.providers.map((p) => (
              <span class="block">
                <strong>{p.provider}</strong>:{" "}
                {p.error ? <span class="bad">listing failed: {p.error}</span> : `${p.listed ?? 0} machines listed`}
              </span>
            ))}
          </p>
          {run.actions.length ? (
            <ul>
              {run.actions.map((a) => (
                <li>
                  <strong>{a.kind.replace(/_/g, " ")}</strong> {a.provider ?? ""}{" "}
                  {a.provider_ref ? <code>{a.provider_ref}</code> : null}{" "}
                  <a href={`/leases/${a.lease_id}`}>{a.lease_id}</a> — {a.detail}{" "}
                  <span class={a.outcome === "failed" ? "bad" : "muted"}>({a.outcome})</span>
                </li>
              ))}
            </ul>
          ) : (
            <p class="muted small">Nothing to do: every machine is accounted for.</p>
          )}
        </section>
      ))}
    </>
  );
}

export function TokensPage(props: { tokens: TokenRow[]; csrf: string; created?: { name: string; token: string } }) {
  return (
    <>
      {props.created ? (
        <section class="panel panel-ok" role="status" aria-labelledby="new-token">
          <h2 id="new-token">Token “{props.created.name}” created</h2>
          <p>Copy it now: it is shown only once.</p>
          <p class="token-once">
            <code>{props.created.token}</code>{" "}
            <button type="button" class="copy" data-copy={props.created.token} aria-label="Copy the new token" hidden>
              Copy
            </button>
          </p>
        </section>
      ) : null}
      <form method="post" action="/tokens" class="panel stack">
        <h2>New token</h2>
        <CsrfField csrf={props.csrf} />
        <div>
          <label for="t-name">Name</label>
          <input id="t-name" name="name" required maxlength={100} placeholder="nightly-batch" />
        </div>
        <fieldset class="checks">
          <legend>Scopes</legend>
          {scopeValues.map((scope) => (
            <label>
              <input type="checkbox" name="scopes" value={scope} checked={scope === "read"} /> {scope}
            </label>
          ))}
        </fieldset>
        <div>
          <button type="submit" class="primary">
            Create token
          </button>
        </div>
      </form>
      {props.tokens.length === 0 ? (
        <Empty>No scoped tokens yet; the admin token (ADMIN_TOKEN) is the only way in.</Empty>
      ) : (
        <div class="table-wrap">
          <table class="cards">
            <caption class="visually-hidden">Tokens</caption>
            <thead>
              <tr>
                <th scope="col">Name</th>
                <th scope="col">Scopes</th>
                <th scope="col">Created</th>
                <th scope="col">Last used</th>
                <th scope="col">State</th>
              </tr>
            </thead>
            <tbody>
              {props.tokens.map((t) => (
                <tr data-token-id={t.id}>
                  <td data-label="Name">
                    <strong>{t.name}</strong>
                    <code class="muted id block">{t.id}</code>
                  </td>
                  <td data-label="Scopes">{t.scopes.join(", ")}</td>
                  <td data-label="Created">
                    <Time at={t.created_at} />
                  </td>
                  <td data-label="Last used">
                    <Time at={t.last_used_at} />
                  </td>
                  <td data-label="State">
                    {t.revoked_at ? (
                      <span>
                        <span class="badge badge-off">revoked</span> <Time at={t.revoked_at} />
                      </span>
                    ) : (
                      <form method="post" action={`/tokens/${t.id}/revoke`} class="inline">
                        <CsrfField csrf={props.csrf} />
                        <button type="submit" class="danger" aria-label={`Revoke ${t.name}`}>
                          Revoke
                        </button>
                      </form>
                    )}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </>
  );
}
