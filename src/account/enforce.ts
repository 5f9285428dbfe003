import { mapLimit, stopViaKeeper } from "../reaper/keepers";
import type { Services } from "../services";
import { budgetEvent, enqueue } from "../webhooks/outbox";
import { type BudgetBreach, checkBudget } from "./budget";
import { roundUsd } from "./spend";

export interface BudgetEnforcement {
  breach: BudgetBreach | null;
  /** leases asked to stop with stop_reason `budget` */
  stopped: string[];
  failed: { leaseId: string; error: string }[];
}

export function breachText(breach: BudgetBreach): string {
  const period = breach.period === "daily" ? "today" : "this month";
  return `spend ${period} is ${roundUsd(breach.amountUsd)} USD, at or over the ${breach.period} budget of ${breach.budgetUsd} USD`;
}

/**
 * When actual spend has reached the daily or monthly budget, every active lease is stopped
 * with stop_reason `budget`. Without a budget configured this costs no query at all.
 */
export async function enforceBudget(services: Services): Promise<BudgetEnforcement> {
  const none: BudgetEnforcement = { breach: null, stopped: [], failed: [] };
  if (services.config.budgetDailyUsd === null && services.config.budgetMonthlyUsd === null) return none;
  const { spend, breach } = await checkBudget(services);
  if (!breach) return none;
  const targets = spend.activeLeases.filter((l) => l.status === "provisioning" || l.status === "running");
  const detail = breachText(breach);
  const outcome: BudgetEnforcement = { breach, stopped: [], failed: [] };
  // Announced once per breach: later runs find no lease left to stop.
  if (targets.length > 0) await enqueue(services.db, budgetEvent(breach, detail, targets.length), services.clock());
  await mapLimit(targets, 5, async (lease) => {
    try {
      await stopViaKeeper(services.keepers, lease.id, "budget", detail);
      outcome.stopped.push(lease.id);
    } catch (error) {
      outcome.failed.push({ leaseId: lease.id, error: error instanceof Error ? error.message : String(error) });
    }
  });
  return outcome;
}
