-- Brokered credentials (sealed with internal/secretbox; the plaintext is never stored) and
-- org-level provider bindings. A credential in use by a binding cannot be deleted.

CREATE TABLE credentials (
    id         text        PRIMARY KEY CHECK (id <> ''),
    org        text        NOT NULL CHECK (org <> ''),
    name       text        NOT NULL,
    provider   text        NOT NULL CHECK (provider <> ''),
    sealed     text        NOT NULL CHECK (sealed <> ''),
    key_id     text        NOT NULL CHECK (key_id <> ''),
    created_by text        NOT NULL,
    created_at timestamptz NOT NULL
);
CREATE INDEX credentials_org ON credentials (org);

CREATE TABLE bindings (
    id            text        PRIMARY KEY CHECK (id <> ''),
    org           text        NOT NULL CHECK (org <> ''),
    project       text        NOT NULL,
    environment   text        NOT NULL,
    ref_pattern   text        NOT NULL CHECK (ref_pattern <> ''),
    conversation  text        NOT NULL,
    provider      text        NOT NULL CHECK (provider <> ''),
    base_url      text        NOT NULL CHECK (base_url <> ''),
    credential_id text        NOT NULL REFERENCES credentials (id),
    config        json        NOT NULL,
    created_by    text        NOT NULL,
    created_at    timestamptz NOT NULL,
    UNIQUE (org, project, environment, ref_pattern, conversation)
);
CREATE INDEX bindings_credential ON bindings (credential_id);
