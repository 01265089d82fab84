-- An identical call (same requester context, ref, biome version and input) made while one is
-- pending joins the pending one instead of holding another (docs/approvals.md): call_key is
-- that identity's hash, and at most one pending approval of an org has it, whichever replica
-- holds it. Approvals written before (or by a previous release) have none and join nothing.
ALTER TABLE approvals ADD COLUMN call_key TEXT;
CREATE UNIQUE INDEX approvals_pending_call ON approvals (org, call_key)
    WHERE status = 'pending' AND call_key IS NOT NULL;
