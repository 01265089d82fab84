-- A grant's lifecycle: a change records a new grant naming the one it supersedes, a revoke
-- stamps who revoked it and when (revoked_at NULL: not revoked). Rows are never deleted:
-- listing shows every grant with who approved, superseded or revoked it.
ALTER TABLE grants ADD COLUMN supersedes TEXT NOT NULL DEFAULT '';
ALTER TABLE grants ADD COLUMN revoked_by TEXT NOT NULL DEFAULT '';
ALTER TABLE grants ADD COLUMN revoked_at INTEGER;
