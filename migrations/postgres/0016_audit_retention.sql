-- Audit retention (issue 28). A prune checkpoints, per chain, the last link it removes
-- (base_seq, base_hash, and base_mac: an HMAC of them under the chain's key, so a base moved
-- by hand does not verify) and the time boundary of unchained records (audit_prune), then
-- deletes in small batches. The append-only trigger lets through only the deletes of records
-- beneath those checkpoints: every other delete, every update and TRUNCATE are still refused,
-- and verification starts each chain at its base, so a prune never reads as tampering and a
-- deletion above a base is still a gap.
ALTER TABLE audit_chain_heads
    ADD COLUMN base_seq bigint NOT NULL DEFAULT 0,
    ADD COLUMN base_hash text NOT NULL DEFAULT '',
    ADD COLUMN base_mac text NOT NULL DEFAULT '';

CREATE TABLE audit_prune (
    id            integer     PRIMARY KEY CHECK (id = 1),
    pruned_before timestamptz NOT NULL,
    pruned_at     timestamptz NOT NULL
);

CREATE OR REPLACE FUNCTION audit_log_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' AND (CASE WHEN OLD.chain_id <> ''
        THEN OLD.chain_seq <= COALESCE((SELECT base_seq FROM audit_chain_heads WHERE chain_id = OLD.chain_id), 0)
        ELSE OLD.time < COALESCE((SELECT pruned_before FROM audit_prune WHERE id = 1), '-infinity'::timestamptz) END) THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'audit_log is append-only: % refused', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END;
$$;
