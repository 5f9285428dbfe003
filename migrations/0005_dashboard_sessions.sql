-- Dashboard sign-in sessions: one row per session cookie, bound to the API token it was opened with.
CREATE TABLE dashboard_sessions (
  -- SHA-256 of the cookie value: a leaked database does not hand out sessions
  id_hash TEXT PRIMARY KEY,
  -- the scoped token this session acts as (its scopes and revocation apply); NULL for ADMIN_TOKEN
  token_id TEXT,
  -- for ADMIN_TOKEN sessions: a digest of the secret at sign-in; a changed secret ends the session
  admin_digest TEXT,
  -- the anti-forgery value every state-changing form of this session must carry
  csrf TEXT NOT NULL,
  created_at TEXT NOT NULL,
  expires_at TEXT NOT NULL
);
CREATE INDEX dashboard_sessions_token ON dashboard_sessions (token_id);
CREATE INDEX dashboard_sessions_expiry ON dashboard_sessions (expires_at);
