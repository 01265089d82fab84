-- Calls waiting for a person's approval, with their validated input. Status moves only by
-- compare-and-set (pending → approved → running → done), so an approved call runs once.
-- Times are Unix microseconds.
CREATE TABLE approvals (
    id            TEXT    PRIMARY KEY CHECK (id <> ''),
    audit_id      TEXT    NOT NULL CHECK (audit_id <> ''),
    ref           TEXT    NOT NULL CHECK (ref <> ''),
    biome         TEXT    NOT NULL,
    requester_ref TEXT    NOT NULL CHECK (requester_ref <> ''),
    environment   TEXT    NOT NULL CHECK (environment <> ''),
    exec          TEXT    NOT NULL CHECK (json_valid(exec)),
    input         TEXT    NOT NULL CHECK (json_valid(input)),
    status        TEXT    NOT NULL CHECK (status IN ('pending', 'approved', 'rejected', 'expired', 'running', 'done', 'failed')),
    decided_by    TEXT    NOT NULL DEFAULT '',
    reason        TEXT    NOT NULL DEFAULT '',
    outcome       TEXT    NOT NULL DEFAULT '',
    output        TEXT    CHECK (output IS NULL OR json_valid(output)),
    created_at    INTEGER NOT NULL,
    expires_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL
);
CREATE INDEX approvals_status ON approvals (status, created_at);
CREATE INDEX approvals_requester ON approvals (requester_ref, created_at);

-- Rate-limit and quota counters: one row per key and fixed window, incremented by one
-- atomic UPSERT that refuses to pass the limit.
CREATE TABLE rate_counters (
    key        TEXT    NOT NULL CHECK (key <> ''),
    window_no  INTEGER NOT NULL,
    count      INTEGER NOT NULL CHECK (count >= 0),
    expires_at INTEGER NOT NULL,
    PRIMARY KEY (key, window_no)
);
CREATE INDEX rate_counters_expiry ON rate_counters (expires_at);
