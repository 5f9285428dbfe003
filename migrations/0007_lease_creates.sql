-- Every create gpulease sends is a record of its own (docs/architecture.md, "Create records"),
-- written before the create is sent. `resolution` goes from 'unresolved' to 'machine' (the
-- machine it made, `provider_ref`) or 'none' (a definite refusal, or a successful lookup made
-- after the create's timeout). A machine that is not its lease's current one is torn down by the
-- lease's keeper (`gone_at` once verified) and its billed time (`cost`) counts in the lease's cost.
CREATE TABLE lease_creates (
  lease_id TEXT NOT NULL,
  seq INTEGER NOT NULL,
  provider TEXT NOT NULL,
  offer_id TEXT NOT NULL,
  sent_at TEXT NOT NULL,
  -- 'rent': sent by the rent path; 'found': a labelled machine the reaper or a lookup found
  -- that no create of the lease had claimed
  origin TEXT NOT NULL DEFAULT 'rent' CHECK (origin IN ('rent', 'found')),
  -- JSON: the offer's facts (gpu, count, price, currency, billing) and the lookup key (image)
  offer TEXT NOT NULL DEFAULT '{}',
  resolution TEXT NOT NULL DEFAULT 'unresolved' CHECK (resolution IN ('unresolved', 'machine', 'none')),
  detail TEXT,
  provider_ref TEXT,
  price_per_hour REAL,
  billed_from TEXT,
  resolved_at TEXT,
  terminate_sent_at TEXT,
  terminates_sent INTEGER NOT NULL DEFAULT 0,
  gone_reads INTEGER NOT NULL DEFAULT 0,
  gone_at TEXT,
  cost REAL NOT NULL DEFAULT 0,
  PRIMARY KEY (lease_id, seq)
);
-- A machine belongs to one create of one lease.
CREATE UNIQUE INDEX lease_creates_machine ON lease_creates (provider, provider_ref) WHERE provider_ref IS NOT NULL;
CREATE INDEX lease_creates_open ON lease_creates (provider, resolution) WHERE resolution = 'unresolved' OR (resolution = 'machine' AND gone_at IS NULL);

-- The JSON column of write-ahead renting becomes rows. A lease's machine is the last create at
-- its provider; other creates of a stopped lease were concluded before; of an active lease
-- they stay unresolved for its keeper to look up.
INSERT INTO lease_creates (lease_id, seq, provider, offer_id, sent_at, resolution, detail, provider_ref, resolved_at, gone_at)
SELECT
  l.id,
  CAST(c.key AS INTEGER) + 1,
  json_extract(c.value, '$.provider'),
  json_extract(c.value, '$.offer_id'),
  json_extract(c.value, '$.sent_at'),
  CASE
    WHEN l.provider_ref IS NOT NULL AND l.provider = json_extract(c.value, '$.provider') AND NOT EXISTS (
      SELECT 1 FROM json_each(l.creates) later
      WHERE later.key > c.key AND json_extract(later.value, '$.provider') = l.provider) THEN 'machine'
    WHEN l.status = 'stopped' THEN 'none'
    ELSE 'unresolved'
  END,
  CASE WHEN l.status = 'stopped' THEN 'concluded before create records' ELSE NULL END,
  CASE
    WHEN l.provider_ref IS NOT NULL AND l.provider = json_extract(c.value, '$.provider') AND NOT EXISTS (
      SELECT 1 FROM json_each(l.creates) later
      WHERE later.key > c.key AND json_extract(later.value, '$.provider') = l.provider) THEN l.provider_ref
    ELSE NULL
  END,
  CASE WHEN l.status = 'stopped' OR l.provider_ref IS NOT NULL THEN COALESCE(l.rented_at, l.stopped_at) ELSE NULL END,
  NULL
FROM leases l, json_each(l.creates) c
WHERE l.creates IS NOT NULL;
UPDATE lease_creates SET resolved_at = NULL WHERE resolution = 'unresolved';

ALTER TABLE leases DROP COLUMN creates;


-- What the lease's other machines (creates that are not its current machine) have cost, in the
-- lease's currency; the lease's `cost` in the API is `cost` + `strays_cost`.
ALTER TABLE leases ADD COLUMN strays_cost REAL NOT NULL DEFAULT 0;
