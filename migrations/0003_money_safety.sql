-- Write-ahead renting: every create sent for a lease, recorded before it is sent, as a JSON
-- array of {"provider", "offer_id", "sent_at"}. The keeper concludes "no machine" only from a
-- successful label lookup at each of these providers after that create's timeout.
ALTER TABLE leases ADD COLUMN creates TEXT;
-- How the rented provider bills, stored at rent time so billing needs no provider name:
-- 'accepted' (from the accepted rental) or 'running'.
ALTER TABLE leases ADD COLUMN billing_starts_at TEXT CHECK (billing_starts_at IS NULL OR billing_starts_at IN ('accepted', 'running'));
-- Rows written before: VRAMfarm is the one provider that bills only from running.
UPDATE leases SET billing_starts_at = CASE WHEN provider = 'vramfarm' THEN 'running' ELSE 'accepted' END
  WHERE provider IS NOT NULL;
