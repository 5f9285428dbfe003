-- What the provider itself billed, per lease and UTC day (RunPod REST GET /v2/billing/pods),
-- beside the ledger's own cost. `leases.billed` is the sum over the lease's days, shown as `billed`.
CREATE TABLE lease_billing (
  lease_id   TEXT NOT NULL REFERENCES leases (id),
  provider   TEXT NOT NULL,
  day        TEXT NOT NULL,
  billed     REAL NOT NULL,
  currency   TEXT NOT NULL,
  checked_at TEXT NOT NULL,
  PRIMARY KEY (lease_id, day)
);
CREATE INDEX lease_billing_day ON lease_billing (day, provider);

ALTER TABLE leases ADD COLUMN billed REAL;
ALTER TABLE leases ADD COLUMN billing_checked_at TEXT;
