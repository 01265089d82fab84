-- Audit retention (issue 28). A prune checkpoints, per chain, the last link it removes
-- (base_seq, base_hash, and base_mac: an HMAC of them under the chain's key, so a base moved
-- by hand does not verify) and the time boundary of unchained records (audit_prune), then
-- deletes in small batches. The append-only trigger lets through only the deletes of records
-- beneath those checkpoints: every other delete is still refused, and verification starts
-- each chain at its base, so a prune never reads as tampering and a deletion above a base
-- is still a gap.
ALTER TABLE audit_chain_heads ADD COLUMN base_seq INTEGER NOT NULL DEFAULT 0;
ALTER TABLE audit_chain_heads ADD COLUMN base_hash TEXT NOT NULL DEFAULT '';
ALTER TABLE audit_chain_heads ADD COLUMN base_mac TEXT NOT NULL DEFAULT '';

CREATE TABLE audit_prune (
    id            INTEGER PRIMARY KEY CHECK (id = 1),
    pruned_before INTEGER NOT NULL,
    pruned_at     INTEGER NOT NULL
);

DROP TRIGGER audit_log_no_delete;
CREATE TRIGGER audit_log_no_delete BEFORE DELETE ON audit_log
WHEN NOT (CASE WHEN OLD.chain_id <> ''
    THEN OLD.chain_seq <= COALESCE((SELECT base_seq FROM audit_chain_heads WHERE chain_id = OLD.chain_id), 0)
    ELSE OLD.time < COALESCE((SELECT pruned_before FROM audit_prune WHERE id = 1), 0) END)
BEGIN
    SELECT RAISE(ABORT, 'audit_log is append-only: only records beneath a prune checkpoint may be deleted');
END;
