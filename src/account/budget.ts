import { RentRefusal } from "../leases/refusal";
import type { Services } from "../services";
import { loadSpend, roundUsd, type Spend } from "./spend";

export interface BudgetBreach {
  period: "daily" | "monthly";
  budgetUsd: number;
  amountUsd: number;
}

/** The first budget that `today`/`month` reach, or null. Reaching it counts as crossing it. */
export function budgetBreach(
  budget: { daily: number | null; monthly: number | null },
  amounts: { today: number; month: number },
  strict: boolean,
): BudgetBreach | null {
  const over = (amount: number, limit: number) => (strict ? amount > limit : amount >= limit);
  if (budget.daily !== null && over(amounts.today, budget.daily)) {
    return { period: "daily", budgetUsd: budget.daily, amountUsd: amounts.today };
  }
  if (budget.monthly !== null && over(amounts.month, budget.monthly)) {
    return { period: "monthly", budgetUsd: budget.monthly, amountUsd: amounts.month };
  }
  return null;
}

function budgetOf(services: Services) {
  return { daily: services.config.budgetDailyUsd, monthly: services.config.budgetMonthlyUsd };
}

/**
 * Refuses (402 budget_exceeded) a rental whose worst case would cross the daily or monthly
 * budget. The worst case counts on top of what was spent and what active leases may still
 * cost by their caps, so leases held to their caps can never cross the budget together.
 */
export async function assertWithinBudget(services: Services, worstCaseUsd: number): Promise<void> {
  const budget = budgetOf(services);
  if (budget.daily === null && budget.monthly === null) return;
  const spend = await loadSpend(services.db, services.clock(), services.config.eurUsd);
  const breach = budgetBreach(
    budget,
    { today: spend.committedToday + worstCaseUsd, month: spend.committedMonth + worstCaseUsd },
    true,
  );
  if (!breach) return;
  const period = breach.period === "daily" ? "today's" : "this month's";
  throw new RentRefusal(
    "budget_exceeded",
    `this rental may cost up to ${roundUsd(worstCaseUsd)} USD, which would take ${period} committed spend to ` +
      `${roundUsd(breach.amountUsd)} USD, over the ${breach.period} budget of ${breach.budgetUsd} USD`,
  );
}

/** Spend now, and the budget actual spend has reached, if any. */
export async function checkBudget(services: Services): Promise<{ spend: Spend; breach: BudgetBreach | null }> {
  const spend = await loadSpend(services.db, services.clock(), services.config.eurUsd);
  return { spend, breach: budgetBreach(budgetOf(services), spend, false) };
}

/**
 * The budget check of a rental whose row (with its worst case as `expected_cost`) is already
 * written: it counts every lease inserted up to this one, so of two racing rentals the later
 * one sees the earlier, and together they can never cross the budget. The breach, or null.
 */
export async function rentalBreach(services: Services, leaseId: string): Promise<BudgetBreach | null> {
  const budget = budgetOf(services);
  if (budget.daily === null && budget.monthly === null) return null;
  const spend = await loadSpend(services.db, services.clock(), services.config.eurUsd, leaseId);
  return budgetBreach(budget, { today: spend.committedToday, month: spend.committedMonth }, true);
}
