-- Accounts connected to OAuth-protected MCP servers (issue 37, internal/connection). A server
-- registered with auth oauth keeps its authorization server and the gateway's client there in
-- oauth (JSON kept as text, byte for byte; a client secret only ever sealed; '' for none).
ALTER TABLE mcp_servers ADD COLUMN oauth text NOT NULL DEFAULT '';

-- One connection per org, provider and owner (the org's own account: owner_ref ''; a
-- person's: their subject ref). The tokens are only ever sealed (internal/secretbox) under
-- key_id; refresh_sealed is '' when no refresh token was issued. expires_at is NULL when the
-- authorization server declared no expiry, refreshed_at NULL until the first refresh. version
-- is 1 when connected and grows by one with every update (compare and set). The unique
-- index also serves the listing of an org's connections.
CREATE TABLE connections (
    id             text        PRIMARY KEY CHECK (id <> ''),
    org            text        NOT NULL CHECK (org <> ''),
    provider_id    text        NOT NULL CHECK (provider_id <> ''),
    owner_kind     text        NOT NULL CHECK (owner_kind IN ('org', 'user')),
    owner_ref      text        NOT NULL,
    status         text        NOT NULL CHECK (status IN ('connected', 'needs-reconnect')),
    scopes         json        NOT NULL,
    access_sealed  text        NOT NULL CHECK (access_sealed <> ''),
    refresh_sealed text        NOT NULL,
    key_id         text        NOT NULL CHECK (key_id <> ''),
    expires_at     timestamptz,
    version        bigint      NOT NULL CHECK (version >= 1),
    created_by     text        NOT NULL,
    created_at     timestamptz NOT NULL,
    refreshed_at   timestamptz,
    UNIQUE (org, provider_id, owner_kind, owner_ref)
);

-- Authorization requests under way: state is the hash of the request's state parameter,
-- taken once by the callback (deleted as it is read); expired ones are pruned.
CREATE TABLE connection_states (
    state           text        PRIMARY KEY CHECK (state <> ''),
    org             text        NOT NULL CHECK (org <> ''),
    provider_id     text        NOT NULL CHECK (provider_id <> ''),
    owner_kind      text        NOT NULL CHECK (owner_kind IN ('org', 'user')),
    owner_ref       text        NOT NULL,
    created_by      text        NOT NULL,
    verifier_sealed text        NOT NULL CHECK (verifier_sealed <> ''),
    key_id          text        NOT NULL CHECK (key_id <> ''),
    created_at      timestamptz NOT NULL,
    expires_at      timestamptz NOT NULL
);
CREATE INDEX connection_states_expires ON connection_states (expires_at);
