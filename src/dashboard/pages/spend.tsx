import type { AccountSpend, SpendDay } from "../../account/spend-days";
import type { BillingDay } from "../../billing/report";
import { BarChart, usdTick } from "../charts";
import { money } from "../format";

/** What GET /v1/account/spend answers. */
export type SpendView = AccountSpend;

/** The providers with any spend in the window, in the order of their spend, largest first. */
function providersOf(days: readonly SpendDay[]): string[] {
  const sums = new Map<string, number>();
  for (const d of days) for (const [p, v] of Object.entries(d.providers)) sums.set(p, (sums.get(p) ?? 0) + v);
  return [...sums.entries()].sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0])).map(([p]) => p);
}

const usd = (value: number) => money(value, "USD");

/** Per provider over the window: the ledger's sum beside the provider's bill, where it reports one. */
function LedgerVsBilled({ billing }: { billing: readonly BillingDay[] }) {
  const sums = new Map<string, { ledger: number; billed: number | null; ledgerBilledDays: number }>();
  for (const row of billing) {
    const entry = sums.get(row.provider) ?? { ledger: 0, billed: null, ledgerBilledDays: 0 };
    entry.ledger += row.ledger;
    if (row.billed !== null) {
      entry.billed = (entry.billed ?? 0) + row.billed;
      entry.ledgerBilledDays += row.ledger;
    }
    sums.set(row.provider, entry);
  }
  return (
    <section class="panel" aria-labelledby="ledger-billed">
      <h2 id="ledger-billed">Ledger and bills, 30 days</h2>
      {sums.size === 0 ? (
        <p class="muted small">Nothing spent in these days.</p>
      ) : (
        <dl class="facts">
          {[...sums.entries()].map(([provider, s]) => (
            <>
              <dt>{provider}</dt>
              <dd class="num">
                {usd(s.ledger)} counted
                {s.billed === null ? (
                  <span class="muted small block">no bill per machine from this provider</span>
                ) : (
                  <span class="small block">
                    {usd(s.billed)} billed on those days ({s.billed - s.ledgerBilledDays >= 0 ? "+" : "−"}
                    {usd(Math.abs(s.billed - s.ledgerBilledDays))})
                  </span>
                )}
              </dd>
            </>
          ))}
        </dl>
      )}
    </section>
  );
}

export function SpendSection(props: { spend: SpendView; billing: readonly BillingDay[] }) {
  const { days, budget } = props.spend;
  const providers = providersOf(days);
  const total = days.reduce((sum, d) => sum + d.total, 0);
  const peak = days.reduce((best, d) => (d.total > best.total ? d : best), days[0] ?? { day: "", total: 0 });
  const over = budget.daily === null ? 0 : days.filter((d) => d.total > (budget.daily ?? 0)).length;
  const description =
    `Spend per UTC day from ${days[0]?.day ?? ""} to ${days.at(-1)?.day ?? ""}, stacked by provider: ` +
    `${usd(total)} in all${peak.total > 0 ? `, the most on ${peak.day} (${usd(peak.total)})` : ""}.` +
    (budget.daily === null ? "" : ` Daily budget ${usd(budget.daily)}, crossed on ${over} of these days.`) +
    " The table below has every figure.";
  return (
    <>
      <h2 id="spend-days">Spend per day, last {days.length} days</h2>
      <div class="chart-grid">
        <BarChart
          id="spend-chart"
          title={`Spend per day, last ${days.length} days`}
          description={description}
          emptyText={`No spend in the last ${days.length} days.`}
          series={providers}
          bars={days.map((d) => ({ label: d.day.slice(5), values: d.providers }))}
          line={budget.daily === null ? null : { value: budget.daily, label: `daily budget ${usd(budget.daily)}` }}
          format={usdTick}
        />
        <LedgerVsBilled billing={props.billing} />
      </div>
      <details class="figures">
        <summary>Every day's figures</summary>
        <div class="table-wrap scroll">
          <table>
            <caption class="visually-hidden">Spend per UTC day and provider, USD</caption>
            <thead>
              <tr>
                <th scope="col">Day (UTC)</th>
                {providers.map((p) => (
                  <th scope="col" class="r">
                    {p}
                  </th>
                ))}
                <th scope="col" class="r">
                  Total
                </th>
                <th scope="col" class="r">
                  Billed
                </th>
              </tr>
            </thead>
            <tbody>
              {days.map((d) => (
                <tr>
                  <th scope="row">{d.day}</th>
                  {providers.map((p) => (
                    <td class="r">{d.providers[p] ? usd(d.providers[p]) : "—"}</td>
                  ))}
                  <td class={budget.daily !== null && d.total > budget.daily ? "r bad" : "r"}>{usd(d.total)}</td>
                  <td class="r">{d.billed === null ? "—" : usd(d.billed)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      </details>
    </>
  );
}
