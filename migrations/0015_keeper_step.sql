-- The keeper's step commits in one batch guarded by what it read (docs/architecture.md, "One
-- step"): `revision` is bumped by every keeper commit, claim and reopen, so a step whose reads a
-- claim outdated writes nothing and starts over.
ALTER TABLE leases ADD COLUMN revision INTEGER NOT NULL DEFAULT 0;
-- A stray's last status read (its next read is due from here: strays are worked by due time,
-- not record order) and when it was flagged teardown_unverified (never read gone in time, or its
-- provider's key is gone).
ALTER TABLE lease_creates ADD COLUMN checked_at TEXT;
ALTER TABLE lease_creates ADD COLUMN unverified_at TEXT;
-- A lease event's structured reason (a stop reason: max_cost, rent_failed, ...): webhooks map
-- events by it, never by parsing the human `detail`.
ALTER TABLE lease_events ADD COLUMN reason TEXT;
