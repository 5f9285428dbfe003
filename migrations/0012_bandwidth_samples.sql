-- Measured memory bandwidth (docs/architecture.md, "LLM gateway"): what each metered model lease
-- delivered, decode tokens/s × model size. GET /v1/offers shows the 30-day median per provider and
-- GPU (and host) and ranks by it once there are MEASURED_MIN_SAMPLES samples.
CREATE TABLE bandwidth_samples (
  id           INTEGER PRIMARY KEY AUTOINCREMENT,
  provider     TEXT NOT NULL CHECK (provider IN ('runpod', 'vast', 'vramfarm', 'sim')),
  -- the lease's GPU display name; offers meet it normalised
  gpu          TEXT NOT NULL,
  -- where the provider names one (a Vast.ai ask); NULL elsewhere
  host         TEXT,
  gpu_count    INTEGER NOT NULL CHECK (gpu_count >= 1),
  -- GB/s over all cards, and per card with the multi-GPU factor taken out
  gbs          REAL NOT NULL CHECK (gbs > 0),
  per_card_gbs REAL NOT NULL CHECK (per_card_gbs > 0),
  -- one sample per lease: a later flush replaces the earlier figure (NULLs never collide)
  lease_id     TEXT UNIQUE,
  at           TEXT NOT NULL
);
-- The 30-day read and the pruning of what falls out of it both walk this index.
CREATE INDEX bandwidth_samples_at ON bandwidth_samples (at);
