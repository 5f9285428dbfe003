-- GGUF facts are keyed by registry and digest (docs/models.md#the-cache): a registry serving
-- another's manifest bytes with its own blob must not size the other's model. `registry` is the
-- origin the manifest was read from ("https://registry.ollama.ai", "https://hf.co"). Rows cached
-- before carry no registry and are dropped: the cache refills from the registries on first use.
DELETE FROM model_manifests;
ALTER TABLE model_manifests ADD COLUMN registry TEXT NOT NULL DEFAULT '';
DROP INDEX model_manifests_digest;
CREATE INDEX model_manifests_registry_digest ON model_manifests (registry, digest);

-- A `running` event's detail held the machine's own URLs (an Ollama that asks for no key), which
-- every read token sees in the events; they are now only in the lease's `access`, for its renter.
UPDATE lease_events SET detail = NULL WHERE kind = 'running';
