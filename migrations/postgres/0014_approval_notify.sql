-- What an approver sees of a held call and who is told about it (docs/approvals.md, issue 24).
-- An approval keeps the biome version it was pinned to, the policy revision that held it and
-- the capability's risk tier; approval_events is the durable outbox of the notifications
-- (webhooks, chat) of its steps, written in the transaction of the step itself.
ALTER TABLE approvals ADD COLUMN biome_version text NOT NULL DEFAULT '';
ALTER TABLE approvals ADD COLUMN policy_revision text NOT NULL DEFAULT '';
ALTER TABLE approvals ADD COLUMN risk_tier text NOT NULL DEFAULT '';
-- Keyset pagination of the held-calls list: newest first, by org.
CREATE INDEX approvals_org_page ON approvals (org, created_at, id);

CREATE TABLE approval_events (
    id          text        PRIMARY KEY CHECK (id <> ''),
    org         text        NOT NULL CHECK (org <> ''),
    approval_id text        NOT NULL CHECK (approval_id <> ''),
    kind        text        NOT NULL CHECK (kind <> ''),
    target      text        NOT NULL CHECK (target <> ''),
    body        json        NOT NULL,
    status      text        NOT NULL CHECK (status IN ('pending', 'delivered', 'failed')),
    attempts    integer     NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    last_error  text        NOT NULL DEFAULT '',
    claimed_by  text        NOT NULL DEFAULT '',
    lease_until timestamptz NOT NULL DEFAULT 'epoch',
    next_at     timestamptz NOT NULL,
    created_at  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL
);
CREATE INDEX approval_events_due ON approval_events (status, next_at);
CREATE INDEX approval_events_done ON approval_events (status, updated_at);
