import type { Provider } from "../providers/types";

export interface WorstCaseInput {
  /** the offer's price per hour, converted to USD */
  pricePerHourUsd: number;
  maxMinutes: number;
  /** USD */
  maxCost: number | null;
  startTimeoutMin: number;
}

export interface WorstCase {
  usd: number;
  /** the minutes the price is counted for, before the max_cost cap */
  billedMinutes: number;
  /** true when max_cost is what bounds it */
  cappedByMaxCost: boolean;
}

/**
 * The budget's worst case for a rental, as the confirmation shows it: price × (START_TIMEOUT_MIN +
 * max_minutes) where the provider bills while the machine boots, price × max(max_minutes, its
 * minimum billed minutes) where billing starts at `running`; max_cost when that is smaller.
 */
export function worstCase(
  provider: Pick<Provider, "billingStartsAt" | "minimumBilledMinutes">,
  input: WorstCaseInput,
): WorstCase {
  const billedMinutes =
    provider.billingStartsAt === "accepted"
      ? input.startTimeoutMin + input.maxMinutes
      : Math.max(input.maxMinutes, provider.minimumBilledMinutes);
  const byTime = (input.pricePerHourUsd * billedMinutes) / 60;
  const cappedByMaxCost = input.maxCost !== null && input.maxCost < byTime;
  const usd = cappedByMaxCost && input.maxCost !== null ? input.maxCost : byTime;
  return { usd: Math.round(usd * 1e6) / 1e6, billedMinutes, cappedByMaxCost };
}
