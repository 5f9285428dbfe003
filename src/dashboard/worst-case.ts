import { type WorstCaseBilling, worstCaseMinutes, worstCaseUsd } from "../leases/pricing";

export interface WorstCase {
  usd: number;
  /** the minutes the price is counted for, before the max_cost cap */
  billedMinutes: number;
  /** true when max_cost is what bounds it */
  cappedByMaxCost: boolean;
}

/**
 * The budget's worst case for a rental (the same formula the rent path checks), with the figures
 * the confirmation page explains it by.
 */
export function worstCase(
  billing: WorstCaseBilling,
  input: { pricePerHourUsd: number; maxMinutes: number; maxCost: number | null },
): WorstCase {
  const usd = worstCaseUsd(
    { price_per_hour_usd: input.pricePerHourUsd },
    { max_minutes: input.maxMinutes, max_cost: input.maxCost ?? undefined },
    billing,
  );
  const billedMinutes = worstCaseMinutes(billing, input.maxMinutes);
  const byTime = (input.pricePerHourUsd * billedMinutes) / 60;
  return { usd, billedMinutes, cappedByMaxCost: input.maxCost !== null && input.maxCost < byTime };
}
