-- Rollups of the audit log for the overview (GET /v1/stats, docs/stats.md): its figures are
-- read from these instead of the log, so their cost follows the window's buckets and the
-- org's distinct refs, not the number of records. A background pass (AdvanceAuditRollups)
-- folds each chain's records past its watermark into buckets of three grains (60, 900 and
-- 3600 s, the windows' buckets), so a record arriving late reopens its bucket; nothing is
-- added to the audit append. A bucket whose records a prune deletes is marked stale and
-- counted again from the records left. Times are Unix microseconds.
CREATE TABLE audit_rollup (
    org          text    NOT NULL,
    grain        bigint  NOT NULL,
    bucket       bigint  NOT NULL,
    decision     text    NOT NULL,
    ref          text    NOT NULL,
    subject_kind text    NOT NULL,
    runner       text    NOT NULL,
    revision     text    NOT NULL,
    records      bigint  NOT NULL,
    errors       bigint  NOT NULL,
    latency_sum  bigint  NOT NULL,
    latency_max  bigint  NOT NULL,
    first_at     bigint  NOT NULL,
    last_at      bigint  NOT NULL,
    PRIMARY KEY (org, grain, bucket, decision, ref, subject_kind, runner, revision)
);
CREATE INDEX audit_rollup_age ON audit_rollup (grain, bucket);

-- Denied records by reason code, a record counted once per code it names.
CREATE TABLE audit_rollup_reasons (
    org     text    NOT NULL,
    grain   bigint  NOT NULL,
    bucket  bigint  NOT NULL,
    code    text    NOT NULL,
    records bigint  NOT NULL,
    PRIMARY KEY (org, grain, bucket, code)
);
CREATE INDEX audit_rollup_reasons_age ON audit_rollup_reasons (grain, bucket);

-- Per chain, the highest seq folded into the rollups.
CREATE TABLE audit_rollup_chains (
    chain_id text    PRIMARY KEY CHECK (chain_id <> ''),
    seq      bigint  NOT NULL
);

-- Buckets a prune removed records of, to count again.
CREATE TABLE audit_rollup_stale (
    org    text    NOT NULL,
    grain  bigint  NOT NULL,
    bucket bigint  NOT NULL,
    PRIMARY KEY (org, grain, bucket)
);

-- Records of no chain (written before chains, or by hand) are not folded: the overview
-- reads them in its range through this index, which holds none of the gateway's records.
CREATE INDEX audit_log_unchained ON audit_log (org, time) WHERE chain_id = '';

-- One row the rollup pass and a prune's deletes lock, so they take turns (SQLite's one
-- writer does this by itself).
CREATE TABLE audit_rollup_lock (id integer PRIMARY KEY CHECK (id = 1));
INSERT INTO audit_rollup_lock (id) VALUES (1);

-- When each credential was last sealed under another key (xema credential rotate-key): the
-- console's "last rotated". NULL: sealed under the key it was created under.
ALTER TABLE credentials ADD COLUMN rotated_at timestamptz;
