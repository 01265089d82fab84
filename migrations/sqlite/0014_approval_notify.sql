-- What an approver sees of a held call and who is told about it (docs/approvals.md, issue 24).
-- An approval keeps the biome version it was pinned to, the policy revision that held it and
-- the capability's risk tier; approval_events is the durable outbox of the notifications
-- (webhooks, chat) of its steps, written in the transaction of the step itself.
ALTER TABLE approvals ADD COLUMN biome_version TEXT NOT NULL DEFAULT '';
ALTER TABLE approvals ADD COLUMN policy_revision TEXT NOT NULL DEFAULT '';
ALTER TABLE approvals ADD COLUMN risk_tier TEXT NOT NULL DEFAULT '';
-- Keyset pagination of the held-calls list: newest first, by org.
CREATE INDEX approvals_org_page ON approvals (org, created_at, id);

CREATE TABLE approval_events (
    id          TEXT    PRIMARY KEY CHECK (id <> ''),
    org         TEXT    NOT NULL CHECK (org <> ''),
    approval_id TEXT    NOT NULL CHECK (approval_id <> ''),
    kind        TEXT    NOT NULL CHECK (kind <> ''),
    target      TEXT    NOT NULL CHECK (target <> ''),
    body        TEXT    NOT NULL CHECK (json_valid(body)),
    status      TEXT    NOT NULL CHECK (status IN ('pending', 'delivered', 'failed')),
    attempts    INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    last_error  TEXT    NOT NULL DEFAULT '',
    claimed_by  TEXT    NOT NULL DEFAULT '',
    lease_until INTEGER NOT NULL DEFAULT 0,
    next_at     INTEGER NOT NULL,
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL
);
CREATE INDEX approval_events_due ON approval_events (status, next_at);
CREATE INDEX approval_events_done ON approval_events (status, updated_at);
