-- Calls waiting for a person's approval, with their validated input. Status moves only by
-- compare-and-set (pending → approved → running → done), so an approved call runs once.
CREATE TABLE approvals (
    id            text        PRIMARY KEY CHECK (id <> ''),
    audit_id      text        NOT NULL CHECK (audit_id <> ''),
    ref           text        NOT NULL CHECK (ref <> ''),
    biome         text        NOT NULL,
    requester_ref text        NOT NULL CHECK (requester_ref <> ''),
    environment   text        NOT NULL CHECK (environment <> ''),
    exec          json        NOT NULL,
    input         json        NOT NULL,
    status        text        NOT NULL CHECK (status IN ('pending', 'approved', 'rejected', 'expired', 'running', 'done', 'failed')),
    decided_by    text        NOT NULL DEFAULT '',
    reason        text        NOT NULL DEFAULT '',
    outcome       text        NOT NULL DEFAULT '',
    output        json,
    created_at    timestamptz NOT NULL,
    expires_at    timestamptz NOT NULL,
    updated_at    timestamptz NOT NULL
);
CREATE INDEX approvals_status ON approvals (status, created_at);
CREATE INDEX approvals_requester ON approvals (requester_ref, created_at);

-- Rate-limit and quota counters shared by every replica: one row per key and fixed window,
-- incremented by one atomic UPSERT that refuses to pass the limit.
CREATE TABLE rate_counters (
    key        text        NOT NULL CHECK (key <> ''),
    window_no  bigint      NOT NULL,
    count      bigint      NOT NULL CHECK (count >= 0),
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (key, window_no)
);
CREATE INDEX rate_counters_expiry ON rate_counters (expires_at);
