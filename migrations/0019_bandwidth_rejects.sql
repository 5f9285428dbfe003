-- Bandwidth samples the keeper dropped as implausible (src/offers/measured.ts), counted by reason.
CREATE TABLE bandwidth_rejects (
  reason TEXT PRIMARY KEY,
  count INTEGER NOT NULL,
  last_at TEXT NOT NULL,
  last_provider TEXT NOT NULL,
  last_gpu TEXT NOT NULL,
  last_gbs REAL NOT NULL
);
