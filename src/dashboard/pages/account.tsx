import type { BillingDay } from "../../billing/report";
import { money } from "../format";
import { SpendSection, type SpendView } from "./spend";

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
