-- Where a provider's own-machine listing that stopped at the adapter's page bound goes on at the
-- next reaper run (docs/architecture.md, "The reaper's listing cursor"). No row: the next run
-- lists from the first page.
CREATE TABLE listing_cursors (
  provider TEXT PRIMARY KEY,
  cursor   TEXT NOT NULL,
  saved_at TEXT NOT NULL
);
