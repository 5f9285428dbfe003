-- Webhooks: subscriptions, the events they are told about, and a durable outbox of deliveries.

CREATE TABLE webhooks (
  id         TEXT PRIMARY KEY,
  url        TEXT NOT NULL,
  events     TEXT NOT NULL,            -- JSON array of event types, or ["*"]
  format     TEXT NOT NULL DEFAULT 'json' CHECK (format IN ('json', 'slack')),
  secret     TEXT NOT NULL,            -- AES-GCM sealed whsec_ secret (see README, Webhooks)
  created_at TEXT NOT NULL
);

-- One row per event that at least one webhook wanted. `data` is the JSON of the body's `data`;
-- NULL until first rendered from the lease row (then frozen, so every retry sends the same).
CREATE TABLE webhook_events (
  id         TEXT PRIMARY KEY,
  type       TEXT NOT NULL,
  lease_id   TEXT,
  detail     TEXT,
  data       TEXT,
  created_at TEXT NOT NULL
);

-- The outbox: one delivery per (event, webhook); its id is sent as Gpulease-Delivery on every try.
CREATE TABLE webhook_deliveries (
  id               TEXT PRIMARY KEY,
  webhook_id       TEXT NOT NULL,
  event_id         TEXT NOT NULL,
  status           TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'delivered', 'failed')),
  attempts         INTEGER NOT NULL DEFAULT 0,
  next_attempt_at  INTEGER NOT NULL,   -- ms since epoch
  last_status_code INTEGER,
  last_error       TEXT,
  created_at       TEXT NOT NULL,
  delivered_at     TEXT
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (status, next_attempt_at);
CREATE INDEX webhook_deliveries_webhook ON webhook_deliveries (webhook_id, created_at DESC, id DESC);
