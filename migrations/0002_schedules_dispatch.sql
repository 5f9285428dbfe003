-- How many rentals a schedule run has tried (no-capacity retries): part of each attempt's
-- Idempotency-Key, and shown in GET /v1/schedules/{id}/runs.
ALTER TABLE schedule_runs ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0;
CREATE INDEX schedule_runs_status ON schedule_runs (status, due_at);
-- The origin a schedule was created on: cron-started leases get their call-back URL from it
-- when PUBLIC_URL is not set (a cron invocation has no request to take it from).
ALTER TABLE schedules ADD COLUMN origin TEXT;
