-- Accounts connected to OAuth-protected MCP servers (issue 37, internal/connection). A server
-- registered with auth oauth keeps its authorization server and the gateway's client there in
-- oauth (JSON, a client secret only ever sealed; '' for none).
ALTER TABLE mcp_servers ADD COLUMN oauth TEXT NOT NULL DEFAULT '' CHECK (oauth = '' OR json_valid(oauth));

-- One connection per org, provider and owner (the org's own account: owner_ref ''; a
-- person's: their subject ref). The tokens are only ever sealed (internal/secretbox) under
-- key_id; refresh_sealed is '' when no refresh token was issued. expires_at is NULL when the
-- authorization server declared no expiry, refreshed_at NULL until the first refresh. version
-- is 1 when connected and grows by one with every update (compare and set). The unique
-- index also serves the listing of an org's connections.
CREATE TABLE connections (
    id             TEXT    PRIMARY KEY CHECK (id <> ''),
    org            TEXT    NOT NULL CHECK (org <> ''),
    provider_id    TEXT    NOT NULL CHECK (provider_id <> ''),
    owner_kind     TEXT    NOT NULL CHECK (owner_kind IN ('org', 'user')),
    owner_ref      TEXT    NOT NULL,
    status         TEXT    NOT NULL CHECK (status IN ('connected', 'needs-reconnect')),
    scopes         TEXT    NOT NULL CHECK (json_valid(scopes)),
    access_sealed  TEXT    NOT NULL CHECK (access_sealed <> ''),
    refresh_sealed TEXT    NOT NULL,
    key_id         TEXT    NOT NULL CHECK (key_id <> ''),
    expires_at     INTEGER,
    version        INTEGER NOT NULL CHECK (version >= 1),
    created_by     TEXT    NOT NULL,
    created_at     INTEGER NOT NULL,
    refreshed_at   INTEGER,
    UNIQUE (org, provider_id, owner_kind, owner_ref)
);

-- Authorization requests under way: state is the hash of the request's state parameter,
-- taken once by the callback (deleted as it is read); expired ones are pruned.
CREATE TABLE connection_states (
    state           TEXT    PRIMARY KEY CHECK (state <> ''),
    org             TEXT    NOT NULL CHECK (org <> ''),
    provider_id     TEXT    NOT NULL CHECK (provider_id <> ''),
    owner_kind      TEXT    NOT NULL CHECK (owner_kind IN ('org', 'user')),
    owner_ref       TEXT    NOT NULL,
    created_by      TEXT    NOT NULL,
    verifier_sealed TEXT    NOT NULL CHECK (verifier_sealed <> ''),
    key_id          TEXT    NOT NULL CHECK (key_id <> ''),
    created_at      INTEGER NOT NULL,
    expires_at      INTEGER NOT NULL
);
CREATE INDEX connection_states_expires ON connection_states (expires_at);
