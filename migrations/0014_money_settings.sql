-- The last valid value of each money setting (BUDGET_DAILY_USD, BUDGET_MONTHLY_USD, EUR_USD) as
-- JSON ("null" for an unset budget): while the var is malformed the crons enforce this value on
-- running leases, in every isolate and after restarts (docs/architecture.md, "Settings").
-- Written by a cron run only when a valid value differs from the stored one.
CREATE TABLE money_settings (
  name TEXT PRIMARY KEY,
  value TEXT NOT NULL,
  updated_at TEXT NOT NULL
);
