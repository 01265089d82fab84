-- Replay and tamper evidence. policy_input is the input the policy decided on (verified
-- context, ref, resource, environment; never the raw call input), set on decision records
-- only: rows written before this migration have none and are reported as not replayable.
-- chain_* link each record to the previous one of its chain (one chain per writing process),
-- and audit_chain_heads checkpoints each chain's last link in the batch's transaction.
ALTER TABLE audit_log ADD COLUMN policy_input json;
ALTER TABLE audit_log ADD COLUMN chain_id text NOT NULL DEFAULT '';
ALTER TABLE audit_log ADD COLUMN chain_seq bigint NOT NULL DEFAULT 0;
ALTER TABLE audit_log ADD COLUMN chain_hash text NOT NULL DEFAULT '';
CREATE INDEX audit_log_chain ON audit_log (chain_id, chain_seq) WHERE chain_id <> '';

CREATE TABLE audit_chain_heads (
    chain_id   text        PRIMARY KEY CHECK (chain_id <> ''),
    seq        bigint      NOT NULL,
    hash       text        NOT NULL,
    updated_at timestamptz NOT NULL
);
