-- Model endpoints (docs/architecture.md, "Model endpoints"): a named model served when called,
-- its replicas model leases rented and stopped by the endpoint's Durable Object (EndpointDO).
CREATE TABLE endpoints (
  id                TEXT PRIMARY KEY,
  name              TEXT NOT NULL UNIQUE,
  model             TEXT NOT NULL,
  context_length    INTEGER CHECK (context_length IS NULL OR context_length BETWEEN 256 AND 1048576),
  min_replicas      INTEGER NOT NULL DEFAULT 0 CHECK (min_replicas BETWEEN 0 AND 16),
  max_replicas      INTEGER NOT NULL DEFAULT 2 CHECK (max_replicas BETWEEN 1 AND 16),
  idle_minutes      INTEGER NOT NULL DEFAULT 15 CHECK (idle_minutes BETWEEN 1 AND 10080),
  cold_start_wait_s INTEGER NOT NULL DEFAULT 0 CHECK (cold_start_wait_s BETWEEN 0 AND 600),
  target_in_flight  INTEGER NOT NULL DEFAULT 4 CHECK (target_in_flight BETWEEN 1 AND 256),
  budget_daily_usd  REAL CHECK (budget_daily_usd IS NULL OR budget_daily_usd > 0),
  providers         TEXT,
  gpu               TEXT,
  max_price         REAL CHECK (max_price IS NULL OR max_price > 0),
  max_minutes       INTEGER NOT NULL DEFAULT 1440 CHECK (max_minutes BETWEEN 1 AND 10080),
  -- SHA-256 of the endpoint's key (gle_…), shown once; rotating replaces it
  key_hash          TEXT NOT NULL UNIQUE,
  token_id          TEXT,
  created_at        TEXT NOT NULL,
  updated_at        TEXT NOT NULL,
  CHECK (min_replicas <= max_replicas)
);

-- Which lease is a replica of which endpoint (kept after the endpoint is deleted: the ledger's history).
CREATE TABLE endpoint_replicas (
  lease_id    TEXT PRIMARY KEY,
  endpoint_id TEXT NOT NULL,
  created_at  TEXT NOT NULL
);
CREATE INDEX endpoint_replicas_by_endpoint ON endpoint_replicas (endpoint_id, created_at);
