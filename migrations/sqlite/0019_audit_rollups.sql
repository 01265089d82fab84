-- Rollups of the audit log for the overview (GET /v1/stats, docs/stats.md): its figures are
-- read from these instead of the log, so their cost follows the window's buckets and the
-- org's distinct refs, not the number of records. A background pass (AdvanceAuditRollups)
-- folds each chain's records past its watermark into buckets of three grains (60, 900 and
-- 3600 s, the windows' buckets), so a record arriving late reopens its bucket; nothing is
-- added to the audit append. A bucket whose records a prune deletes is marked stale and
-- counted again from the records left. Times are Unix microseconds.
CREATE TABLE audit_rollup (
    org          TEXT    NOT NULL,
    grain        INTEGER NOT NULL,
    bucket       INTEGER NOT NULL,
    decision     TEXT    NOT NULL,
    ref          TEXT    NOT NULL,
    subject_kind TEXT    NOT NULL,
    runner       TEXT    NOT NULL,
    revision     TEXT    NOT NULL,
    records      INTEGER NOT NULL,
    errors       INTEGER NOT NULL,
    latency_sum  INTEGER NOT NULL,
    latency_max  INTEGER NOT NULL,
    first_at     INTEGER NOT NULL,
    last_at      INTEGER NOT NULL,
    PRIMARY KEY (org, grain, bucket, decision, ref, subject_kind, runner, revision)
);
CREATE INDEX audit_rollup_age ON audit_rollup (grain, bucket);

-- Denied records by reason code, a record counted once per code it names.
CREATE TABLE audit_rollup_reasons (
    org     TEXT    NOT NULL,
    grain   INTEGER NOT NULL,
    bucket  INTEGER NOT NULL,
    code    TEXT    NOT NULL,
    records INTEGER NOT NULL,
    PRIMARY KEY (org, grain, bucket, code)
);
CREATE INDEX audit_rollup_reasons_age ON audit_rollup_reasons (grain, bucket);

-- Per chain, the highest seq folded into the rollups.
CREATE TABLE audit_rollup_chains (
    chain_id TEXT    PRIMARY KEY CHECK (chain_id <> ''),
    seq      INTEGER NOT NULL
);

-- Buckets a prune removed records of, to count again.
CREATE TABLE audit_rollup_stale (
    org    TEXT    NOT NULL,
    grain  INTEGER NOT NULL,
    bucket INTEGER NOT NULL,
    PRIMARY KEY (org, grain, bucket)
);

-- Records of no chain (written before chains, or by hand) are not folded: the overview
-- reads them in its range through this index, which holds none of the gateway's records.
CREATE INDEX audit_log_unchained ON audit_log (org, time) WHERE chain_id = '';

-- When each credential was last sealed under another key (xema credential rotate-key): the
-- console's "last rotated". NULL: sealed under the key it was created under.
ALTER TABLE credentials ADD COLUMN rotated_at INTEGER;
