-- What a model's registry said (docs/models.md#the-cache): its manifest digest, the bytes of its
-- weights and the GGUF header fields the VRAM estimate reads. Served for a day, then checked
-- again (a tag can move); the header is read once per digest, so rows are also found by digest.
CREATE TABLE model_manifests (
  name          TEXT PRIMARY KEY,   -- the canonical reference, "qwen2.5:32b"
  digest        TEXT NOT NULL,      -- "sha256:" + sha256 of the manifest bytes
  weights_bytes INTEGER NOT NULL,   -- model + projector + adapter layers
  arch          TEXT NOT NULL,      -- JSON: architecture, block_count, embedding_length, head counts, ...
  fetched_at    TEXT NOT NULL       -- when the registry last answered for this name
);

CREATE INDEX model_manifests_digest ON model_manifests (digest);
