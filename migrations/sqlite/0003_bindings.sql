-- Brokered credentials (sealed with internal/secretbox; the plaintext is never stored) and
-- org-level provider bindings. A credential in use by a binding cannot be deleted.

CREATE TABLE credentials (
    id         TEXT    PRIMARY KEY CHECK (id <> ''),
    org        TEXT    NOT NULL CHECK (org <> ''),
    name       TEXT    NOT NULL,
    provider   TEXT    NOT NULL CHECK (provider <> ''),
    sealed     TEXT    NOT NULL CHECK (sealed <> ''),
    key_id     TEXT    NOT NULL CHECK (key_id <> ''),
    created_by TEXT    NOT NULL,
    created_at INTEGER NOT NULL
);
CREATE INDEX credentials_org ON credentials (org);

CREATE TABLE bindings (
    id            TEXT    PRIMARY KEY CHECK (id <> ''),
    org           TEXT    NOT NULL CHECK (org <> ''),
    project       TEXT    NOT NULL,
    environment   TEXT    NOT NULL,
    ref_pattern   TEXT    NOT NULL CHECK (ref_pattern <> ''),
    conversation  TEXT    NOT NULL,
    provider      TEXT    NOT NULL CHECK (provider <> ''),
    base_url      TEXT    NOT NULL CHECK (base_url <> ''),
    credential_id TEXT    NOT NULL REFERENCES credentials (id),
    config        TEXT    NOT NULL CHECK (json_valid(config)),
    created_by    TEXT    NOT NULL,
    created_at    INTEGER NOT NULL,
    UNIQUE (org, project, environment, ref_pattern, conversation)
);
CREATE INDEX bindings_credential ON bindings (credential_id);
