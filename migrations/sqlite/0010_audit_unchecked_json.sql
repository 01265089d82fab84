-- The audit log's JSON columns lose their json_valid CHECKs: the store validates every
-- record's documents in Go before it inserts them (store.AuditRecord.Validate, in both
-- AppendAudit and AppendAudits), and SQLite's json_valid parsed each document again on the
-- hot path, ~15 % of an append's CPU (BENCHMARKS.md, issue 15, fourth step). A raw SQL writer
-- could store invalid JSON; the append-only triggers, not these CHECKs, are what keeps a
-- stored record from changing, and the hash chain what shows a forged one. SQLite cannot drop
-- a CHECK, so the table is rebuilt with its rows, indexes and triggers (DROP TABLE fires no
-- trigger). Columns keep their order and types.
CREATE TABLE audit_log_new (
    id              TEXT    PRIMARY KEY CHECK (id <> ''),
    time            INTEGER NOT NULL,
    ref             TEXT    NOT NULL,
    subject_kind    TEXT    NOT NULL,
    subject_ref     TEXT    NOT NULL,
    environment     TEXT    NOT NULL,
    decision        TEXT    NOT NULL CHECK (decision <> ''),
    reasons         TEXT,
    suggestions     TEXT,
    obligations     TEXT,
    bundle_revision TEXT    NOT NULL,
    input_hash      TEXT    NOT NULL,
    runner          TEXT    NOT NULL,
    outcome         TEXT    NOT NULL,
    latency_micros  INTEGER NOT NULL,
    parent_id       TEXT    NOT NULL,
    detail          TEXT,
    org             TEXT    NOT NULL DEFAULT 'default',
    policy_input    TEXT,
    chain_id        TEXT    NOT NULL DEFAULT '',
    chain_seq       INTEGER NOT NULL DEFAULT 0,
    chain_hash      TEXT    NOT NULL DEFAULT ''
);
INSERT INTO audit_log_new (id, time, ref, subject_kind, subject_ref, environment, decision, reasons, suggestions,
    obligations, bundle_revision, input_hash, runner, outcome, latency_micros, parent_id, detail, org, policy_input,
    chain_id, chain_seq, chain_hash)
SELECT id, time, ref, subject_kind, subject_ref, environment, decision, reasons, suggestions,
    obligations, bundle_revision, input_hash, runner, outcome, latency_micros, parent_id, detail, org, policy_input,
    chain_id, chain_seq, chain_hash FROM audit_log ORDER BY rowid;
DROP TABLE audit_log;
ALTER TABLE audit_log_new RENAME TO audit_log;
CREATE INDEX audit_log_time ON audit_log (time);
CREATE INDEX audit_log_parent ON audit_log (parent_id) WHERE parent_id <> '';
CREATE INDEX audit_log_org_time ON audit_log (org, time);
CREATE INDEX audit_log_chain ON audit_log (chain_id, chain_seq) WHERE chain_id <> '';
CREATE INDEX audit_log_org_subject_time ON audit_log (org, subject_ref, time, id);
CREATE INDEX audit_log_org_ref_time ON audit_log (org, ref, time, id);
CREATE TRIGGER audit_log_no_update BEFORE UPDATE ON audit_log
BEGIN
    SELECT RAISE(ABORT, 'audit_log is append-only');
END;
CREATE TRIGGER audit_log_no_delete BEFORE DELETE ON audit_log
BEGIN
    SELECT RAISE(ABORT, 'audit_log is append-only');
END;
CREATE TRIGGER audit_log_no_replace BEFORE INSERT ON audit_log
WHEN EXISTS (SELECT 1 FROM audit_log WHERE id = NEW.id)
BEGIN
    SELECT RAISE(ABORT, 'audit_log is append-only: the id exists');
END;
