-- Crash safety (docs/approvals.md). An approval now records who holds it and until when
-- (claimed_by, lease_until), and two more states: dispatched (the call is handed to its
-- runner; it may have reached its provider) and interrupted (terminal: it was dispatched, then
-- the gateway stopped before its outcome was recorded).
ALTER TABLE approvals DROP CONSTRAINT approvals_status_check;
ALTER TABLE approvals ADD CONSTRAINT approvals_status_check CHECK (status IN ('pending', 'approved', 'rejected', 'expired',
    'running', 'dispatched', 'done', 'failed', 'interrupted'));
ALTER TABLE approvals ADD COLUMN claimed_by text NOT NULL DEFAULT '';
ALTER TABLE approvals ADD COLUMN lease_until timestamptz NOT NULL DEFAULT 'epoch';
CREATE INDEX approvals_lease ON approvals (status, lease_until);

-- Idempotency keys: the first answer of a call made with an Idempotency-Key, per caller
-- (org + subject) and key, for 24 h. state is running until the answer is stored.
CREATE TABLE idempotency_keys (
    org        text        NOT NULL,
    subject    text        NOT NULL CHECK (subject <> ''),
    key        text        NOT NULL CHECK (key <> ''),
    input_hash text        NOT NULL CHECK (input_hash <> ''),
    state      text        NOT NULL CHECK (state IN ('running', 'done')),
    status     integer     NOT NULL DEFAULT 0,
    body       text,
    audit_id   text        NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (org, subject, key)
);
CREATE INDEX idempotency_keys_expiry ON idempotency_keys (expires_at);

-- Readiness' write probe: one row per replica, rewritten at most once a second.
CREATE TABLE write_probe (
    replica text        PRIMARY KEY CHECK (replica <> ''),
    at      timestamptz NOT NULL
);
