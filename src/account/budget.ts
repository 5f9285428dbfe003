import type { Services } from "../services";
import { loadSpend, type Spend } from "./spend";

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
