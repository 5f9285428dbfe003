-- A model lease's gateway answers the keeper could not trust or read: samples dropped as
-- implausible (src/keeper/meter.ts), and lines or SSE events over their bound passed on unparsed.
ALTER TABLE lease_usage ADD COLUMN dropped_answers INTEGER NOT NULL DEFAULT 0;
ALTER TABLE lease_usage ADD COLUMN unparsed_lines INTEGER NOT NULL DEFAULT 0;
