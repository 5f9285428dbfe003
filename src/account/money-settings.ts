import { z } from "zod";
import {
  type Config,
  MONEY_SETTINGS,
  type MoneySetting,
  type MoneyValues,
  moneyValuesOf,
  rememberValid,
  type Settings,
  withMoneyValues,
} from "../config";
import { iso } from "../lib/time";

const amount = z.number().positive();
const storedSchemas: Record<MoneySetting, z.ZodType> = {
  BUDGET_DAILY_USD: amount.nullable(),
  BUDGET_MONTHLY_USD: amount.nullable(),
  EUR_USD: amount,
};

export interface SettledMoney {
  /** the settings' config, each malformed money setting at its stored last valid value */
  config: Config;
  /** the malformed money settings replaced by a stored value */
  restored: MoneySetting[];
  /** the malformed money settings nothing was ever stored for (left at the isolate's fallback) */
  unknown: MoneySetting[];
}

async function readStored(db: D1Database): Promise<Map<MoneySetting, unknown>> {
  const { results } = await db.prepare("SELECT name, value FROM money_settings").all<{ name: string; value: string }>();
  const stored = new Map<MoneySetting, unknown>();
  for (const { name, value } of results) {
    if (!(MONEY_SETTINGS as readonly string[]).includes(name)) continue;
    let json: unknown;
    try {
      json = JSON.parse(value);
    } catch {
      continue;
    }
    // A row that does not hold a valid value counts as none: the next valid value replaces it.
    const parsed = storedSchemas[name as MoneySetting].safeParse(json);
    if (parsed.success) stored.set(name as MoneySetting, parsed.data);
  }
  return stored;
}

/**
 * One read per cron run. Each valid money setting that differs from the stored one is written;
 * each malformed one is replaced by its stored last valid value, so the budget a deploy mistyped
 * is still enforced on running leases, in any isolate and after any restart.
 */
export async function settleMoneySettings(db: D1Database, settings: Settings, now: number): Promise<SettledMoney> {
  const stored = await readStored(db);
  const current = moneyValuesOf(settings.config);
  const restored: Partial<Record<MoneySetting, unknown>> = {};
  const unknown: MoneySetting[] = [];
  const writes: D1PreparedStatement[] = [];
  for (const name of MONEY_SETTINGS) {
    if (settings.invalidVars.includes(name)) {
      if (stored.has(name)) restored[name] = stored.get(name);
      else unknown.push(name);
      continue;
    }
    const value = JSON.stringify(current[name]);
    if (stored.has(name) && JSON.stringify(stored.get(name)) === value) continue;
    writes.push(
      db
        .prepare(
          "INSERT INTO money_settings (name, value, updated_at) VALUES (?, ?, ?) " +
            "ON CONFLICT (name) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at",
        )
        .bind(name, value, iso(now)),
    );
  }
  if (writes.length > 0) await db.batch(writes);
  const values = restored as Partial<MoneyValues>;
  rememberValid(values);
  return {
    config: withMoneyValues(settings.config, values),
    restored: Object.keys(restored) as MoneySetting[],
    unknown,
  };
}
