-- A schedule's model lease gets its inference key through the lease.running webhook only
-- (docs/architecture.md, "LLM gateway"): until the lease stops the key is kept sealed with a key
-- derived from ADMIN_TOKEN, so the sender can add it to each delivery without it ever being
-- written in plain text to the outbox, an event or the lease's API view.
ALTER TABLE leases ADD COLUMN inference_key_sealed TEXT;
