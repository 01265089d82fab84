-- Crash safety (docs/approvals.md). An approval now records who holds it and until when
-- (claimed_by, lease_until: Unix microseconds), and two more states: dispatched (the call is
-- handed to its runner; it may have reached its provider) and interrupted (terminal: it was
-- dispatched, then the gateway stopped before its outcome was recorded). SQLite cannot alter
-- a CHECK constraint, so the table is rebuilt with its rows, indexes and columns kept.
CREATE TABLE approvals_new (
    id            TEXT    PRIMARY KEY CHECK (id <> ''),
    audit_id      TEXT    NOT NULL CHECK (audit_id <> ''),
    ref           TEXT    NOT NULL CHECK (ref <> ''),
    biome         TEXT    NOT NULL,
    requester_ref TEXT    NOT NULL CHECK (requester_ref <> ''),
    environment   TEXT    NOT NULL CHECK (environment <> ''),
    exec          TEXT    NOT NULL CHECK (json_valid(exec)),
    input         TEXT    NOT NULL CHECK (json_valid(input)),
    status        TEXT    NOT NULL CHECK (status IN ('pending', 'approved', 'rejected', 'expired', 'running', 'dispatched',
                                                     'done', 'failed', 'interrupted')),
    decided_by    TEXT    NOT NULL DEFAULT '',
    reason        TEXT    NOT NULL DEFAULT '',
    outcome       TEXT    NOT NULL DEFAULT '',
    output        TEXT    CHECK (output IS NULL OR json_valid(output)),
    created_at    INTEGER NOT NULL,
    expires_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL,
    org           TEXT    NOT NULL DEFAULT 'default' CHECK (org <> ''),
    claimed_by    TEXT    NOT NULL DEFAULT '',
    lease_until   INTEGER NOT NULL DEFAULT 0
);
INSERT INTO approvals_new (id, audit_id, ref, biome, requester_ref, environment, exec, input, status, decided_by, reason,
    outcome, output, created_at, expires_at, updated_at, org)
SELECT id, audit_id, ref, biome, requester_ref, environment, exec, input, status, decided_by, reason,
    outcome, output, created_at, expires_at, updated_at, org FROM approvals;
DROP TABLE approvals;
ALTER TABLE approvals_new RENAME TO approvals;
CREATE INDEX approvals_status ON approvals (status, created_at);
CREATE INDEX approvals_requester ON approvals (requester_ref, created_at);
CREATE INDEX approvals_org ON approvals (org, status, created_at);
CREATE INDEX approvals_lease ON approvals (status, lease_until);

-- Idempotency keys: the first answer of a call made with an Idempotency-Key, per caller
-- (org + subject) and key, for 24 h. state is running until the answer is stored.
CREATE TABLE idempotency_keys (
    org        TEXT    NOT NULL,
    subject    TEXT    NOT NULL CHECK (subject <> ''),
    key        TEXT    NOT NULL CHECK (key <> ''),
    input_hash TEXT    NOT NULL CHECK (input_hash <> ''),
    state      TEXT    NOT NULL CHECK (state IN ('running', 'done')),
    status     INTEGER NOT NULL DEFAULT 0,
    body       TEXT,
    audit_id   TEXT    NOT NULL DEFAULT '',
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    PRIMARY KEY (org, subject, key)
);
CREATE INDEX idempotency_keys_expiry ON idempotency_keys (expires_at);

-- Readiness' write probe: one row per replica, rewritten at most once a second.
CREATE TABLE write_probe (
    replica TEXT    PRIMARY KEY CHECK (replica <> ''),
    at      INTEGER NOT NULL
);
