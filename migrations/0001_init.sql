-- gpulease ledger. Times are ISO-8601 UTC strings; money is REAL in the currency beside it.

CREATE TABLE leases (
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
                          'budget', 'reaper', 'rent_failed')),
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
  teardown_verified_at TEXT
);
CREATE INDEX leases_status_created ON leases (status, created_at DESC, id DESC);
CREATE INDEX leases_created ON leases (created_at DESC, id DESC);
CREATE INDEX leases_provider_ref ON leases (provider, provider_ref);
CREATE UNIQUE INDEX leases_idempotency ON leases (idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX leases_schedule ON leases (schedule_id, created_at DESC);

CREATE TABLE lease_events (
  seq      INTEGER PRIMARY KEY AUTOINCREMENT,
  lease_id TEXT NOT NULL,
  at       TEXT NOT NULL,
  kind     TEXT NOT NULL,
  detail   TEXT
);
CREATE INDEX lease_events_lease ON lease_events (lease_id, seq);

CREATE TABLE schedules (
  id            TEXT PRIMARY KEY,
  name          TEXT NOT NULL,
  cron          TEXT NOT NULL,
  timezone      TEXT NOT NULL DEFAULT 'UTC',
  enabled       INTEGER NOT NULL DEFAULT 1 CHECK (enabled IN (0, 1)),
  lease_spec    TEXT NOT NULL,
  next_run_at   TEXT,
  last_run_at   TEXT,
  last_lease_id TEXT,
  retry_until   TEXT,
  created_at    TEXT NOT NULL,
  updated_at    TEXT NOT NULL
);
CREATE INDEX schedules_due ON schedules (enabled, next_run_at);

-- One row per schedule and due time: the database, not luck, makes a doubled cron start one lease.
CREATE TABLE schedule_runs (
  schedule_id TEXT NOT NULL,
  due_at      TEXT NOT NULL,
  status      TEXT NOT NULL DEFAULT 'claimed'
              CHECK (status IN ('claimed', 'started', 'skipped', 'retrying', 'failed')),
  lease_id    TEXT,
  detail      TEXT,
  created_at  TEXT NOT NULL,
  updated_at  TEXT NOT NULL,
  PRIMARY KEY (schedule_id, due_at)
);

CREATE TABLE tokens (
  id           TEXT PRIMARY KEY,
  name         TEXT NOT NULL,
  token_hash   TEXT NOT NULL UNIQUE,
  scopes       TEXT NOT NULL,
  created_at   TEXT NOT NULL,
  last_used_at TEXT,
  revoked_at   TEXT
);

CREATE TABLE reaper_runs (
  id        INTEGER PRIMARY KEY AUTOINCREMENT,
  at        TEXT NOT NULL,
  mode      TEXT NOT NULL CHECK (mode IN ('enforce', 'report')),
  providers TEXT NOT NULL,
  actions   TEXT NOT NULL
);
CREATE INDEX reaper_runs_at ON reaper_runs (at DESC);
