-- MCP Tasks (docs/approvals.md): a held call is its requester's task. withdrawn is a new
-- terminal state (its requester cancelled it while it was pending; it never runs), and
-- answer keeps the answer the run gave, {"status": N, "body": {...}}, so a task and an
-- idempotent retry return exactly what a synchronous call would have answered. SQLite cannot
-- alter a CHECK constraint, so the table is rebuilt with its rows, indexes and columns kept.
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
                                                     'done', 'failed', 'interrupted', 'withdrawn')),
    decided_by    TEXT    NOT NULL DEFAULT '',
    reason        TEXT    NOT NULL DEFAULT '',
    outcome       TEXT    NOT NULL DEFAULT '',
    output        TEXT    CHECK (output IS NULL OR json_valid(output)),
    created_at    INTEGER NOT NULL,
    expires_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL,
    org           TEXT    NOT NULL DEFAULT 'default' CHECK (org <> ''),
    claimed_by    TEXT    NOT NULL DEFAULT '',
    lease_until   INTEGER NOT NULL DEFAULT 0,
    answer        TEXT    CHECK (answer IS NULL OR json_valid(answer))
);
INSERT INTO approvals_new (id, audit_id, ref, biome, requester_ref, environment, exec, input, status, decided_by, reason,
    outcome, output, created_at, expires_at, updated_at, org, claimed_by, lease_until)
SELECT id, audit_id, ref, biome, requester_ref, environment, exec, input, status, decided_by, reason,
    outcome, output, created_at, expires_at, updated_at, org, claimed_by, lease_until FROM approvals;
DROP TABLE approvals;
ALTER TABLE approvals_new RENAME TO approvals;
CREATE INDEX approvals_status ON approvals (status, created_at);
CREATE INDEX approvals_requester ON approvals (requester_ref, created_at);
CREATE INDEX approvals_org ON approvals (org, status, created_at);
CREATE INDEX approvals_lease ON approvals (status, lease_until);
