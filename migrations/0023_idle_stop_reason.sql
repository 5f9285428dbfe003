-- An idle stop gets its own stop_reason, 'idle': a model lease with idle_minutes and an
-- endpoint's replica stopped for having no request (docs/storage.md, "leases"). Rows stopped so
-- before keep 'requested' (their events say "idle: …"). SQLite cannot change a CHECK in place:
-- the table is rebuilt with every column as 0011, 0013 and 0015 left it, as 0010 did, and
-- lease_billing (its only child) alongside: dropping a parent that still has children would count
-- as a foreign-key violation even with deferred checks, and D1 cannot switch foreign keys off.
-- Renaming leases_new to leases rewrites the new child's reference to `leases`.

CREATE TABLE leases_new (
  id                   TEXT PRIMARY KEY,
  name                 TEXT,
  status               TEXT NOT NULL DEFAULT 'provisioning'
                       CHECK (status IN ('provisioning', 'running', 'stopping', 'stopped')),
  provider             TEXT CHECK (provider IS NULL OR provider IN ('runpod', 'vast', 'vramfarm', 'sim')),
  provider_ref         TEXT,
  label                TEXT NOT NULL UNIQUE,
  offer_id             TEXT,
  gpu                  TEXT,
  gpu_count            INTEGER,
  vram_gb              REAL,
  price_per_hour       REAL,
  currency             TEXT CHECK (currency IS NULL OR currency IN ('USD', 'EUR')),
  template             TEXT NOT NULL DEFAULT 'ollama' CHECK (template IN ('ollama', 'custom')),
  spec                 TEXT NOT NULL DEFAULT '{}',
  max_minutes          INTEGER NOT NULL CHECK (max_minutes BETWEEN 1 AND 10080),
  max_cost             REAL CHECK (max_cost IS NULL OR max_cost > 0),
  expected_cost        REAL,
  cost                 REAL NOT NULL DEFAULT 0,
  access               TEXT,
  error                TEXT,
  stop_reason          TEXT CHECK (stop_reason IS NULL OR stop_reason IN
                         ('requested', 'max_minutes', 'max_cost', 'job_done', 'start_timeout',
                          'budget', 'reaper', 'rent_failed', 'start_failed', 'idle')),
  exit_code            INTEGER,
  schedule_id          TEXT,
  token_id             TEXT,
  idempotency_key      TEXT,
  callback_hash        TEXT,
  attempts             TEXT,
  created_at           TEXT NOT NULL,
  rented_at            TEXT,
  running_at           TEXT,
  stop_requested_at    TEXT,
  stopped_at           TEXT,
  teardown_verified_at TEXT,
  billing_starts_at    TEXT CHECK (billing_starts_at IS NULL OR billing_starts_at IN ('accepted', 'running')),
  billed               REAL,
  billing_checked_at   TEXT,
  strays_cost          REAL NOT NULL DEFAULT 0,
  inference_key_hash   TEXT,
  inference_key_sealed TEXT,
  revision             INTEGER NOT NULL DEFAULT 0
);

-- rowid kept: the budget check counts the leases inserted up to one (rowid order).
INSERT INTO leases_new (
  rowid, id, name, status, provider, provider_ref, label, offer_id, gpu, gpu_count, vram_gb, price_per_hour,
  currency, template, spec, max_minutes, max_cost, expected_cost, cost, access, error, stop_reason,
  exit_code, schedule_id, token_id, idempotency_key, callback_hash, attempts, created_at, rented_at,
  running_at, stop_requested_at, stopped_at, teardown_verified_at, billing_starts_at, billed,
  billing_checked_at, strays_cost, inference_key_hash, inference_key_sealed, revision
)
SELECT
  rowid, id, name, status, provider, provider_ref, label, offer_id, gpu, gpu_count, vram_gb, price_per_hour,
  currency, template, spec, max_minutes, max_cost, expected_cost, cost, access, error, stop_reason,
  exit_code, schedule_id, token_id, idempotency_key, callback_hash, attempts, created_at, rented_at,
  running_at, stop_requested_at, stopped_at, teardown_verified_at, billing_starts_at, billed,
  billing_checked_at, strays_cost, inference_key_hash, inference_key_sealed, revision
FROM leases ORDER BY rowid;

CREATE TABLE lease_billing_new (
  lease_id   TEXT NOT NULL REFERENCES leases_new (id),
  provider   TEXT NOT NULL,
  day        TEXT NOT NULL,
  billed     REAL NOT NULL,
  currency   TEXT NOT NULL,
  checked_at TEXT NOT NULL,
  PRIMARY KEY (lease_id, day)
);
INSERT INTO lease_billing_new (lease_id, provider, day, billed, currency, checked_at)
SELECT lease_id, provider, day, billed, currency, checked_at FROM lease_billing;

DROP TABLE lease_billing;
DROP TABLE leases;
ALTER TABLE leases_new RENAME TO leases;
ALTER TABLE lease_billing_new RENAME TO lease_billing;

CREATE INDEX leases_status_created ON leases (status, created_at DESC, id DESC);
CREATE INDEX leases_created ON leases (created_at DESC, id DESC);
CREATE INDEX leases_provider_ref ON leases (provider, provider_ref);
CREATE UNIQUE INDEX leases_idempotency ON leases (idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX leases_schedule ON leases (schedule_id, created_at DESC);
CREATE INDEX lease_billing_day ON lease_billing (day, provider);

-- An endpoint's replica names its endpoint in its spec (the lease's `endpoint`); replicas
-- rented before carry it from endpoint_replicas while their endpoint exists.
UPDATE leases
SET spec = json_set(spec, '$.endpoint', (
  SELECT e.name FROM endpoint_replicas r JOIN endpoints e ON e.id = r.endpoint_id WHERE r.lease_id = leases.id
))
WHERE id IN (SELECT r.lease_id FROM endpoint_replicas r JOIN endpoints e ON e.id = r.endpoint_id)
  AND json_valid(spec);
