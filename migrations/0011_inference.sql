-- The LLM gateway (docs/architecture.md, "LLM gateway"): each model lease's inference key, stored
-- as a SHA-256 hash (shown once), and what its requests came to, flushed by the lease's keeper at
-- most every few seconds (never one D1 write per request).
ALTER TABLE leases ADD COLUMN inference_key_hash TEXT;

CREATE TABLE lease_usage (
  lease_id            TEXT PRIMARY KEY,
  requests            INTEGER NOT NULL DEFAULT 0,
  errors              INTEGER NOT NULL DEFAULT 0,
  prompt_tokens       INTEGER NOT NULL DEFAULT 0,
  completion_tokens   INTEGER NOT NULL DEFAULT 0,
  -- medians over the lease's recent requests
  decode_tokens_per_s REAL,
  first_token_ms      REAL,
  updated_at          TEXT NOT NULL
);
