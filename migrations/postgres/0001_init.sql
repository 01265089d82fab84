-- JSON columns are json (not jsonb) so that documents round-trip byte for byte.

CREATE TABLE biome_versions (
    seq           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id            text        NOT NULL CHECK (id <> ''),
    version       text        NOT NULL CHECK (version <> ''),
    manifest      json        NOT NULL,
    contributions json,
    content_hash  text        NOT NULL CHECK (content_hash <> ''),
    digest_hash   text        NOT NULL,
    digest        json,
    created_at    timestamptz NOT NULL,
    UNIQUE (id, version)
);

CREATE TABLE capabilities (
    ref           text        PRIMARY KEY CHECK (ref <> ''),
    biome_id      text        NOT NULL CHECK (biome_id <> ''),
    biome_version text        NOT NULL,
    manifest      json        NOT NULL,
    invocation    json,
    runner_kind   text        NOT NULL,
    lifecycle     text        NOT NULL CHECK (lifecycle IN ('proposed', 'seeded', 'published', 'deprecated', 'retired')),
    replaced_by   text        NOT NULL DEFAULT '',
    updated_at    timestamptz NOT NULL
);
CREATE INDEX capabilities_biome ON capabilities (biome_id, biome_version);

CREATE TABLE lifecycle_events (
    seq         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    ref         text        NOT NULL REFERENCES capabilities (ref),
    from_state  text        NOT NULL CHECK (from_state IN ('proposed', 'seeded', 'published', 'deprecated', 'retired')),
    to_state    text        NOT NULL CHECK (to_state IN ('proposed', 'seeded', 'published', 'deprecated', 'retired')),
    replaced_by text        NOT NULL DEFAULT '',
    actor       text        NOT NULL,
    at          timestamptz NOT NULL
);
CREATE INDEX lifecycle_events_ref ON lifecycle_events (ref, seq);

CREATE TABLE grants (
    id            text        PRIMARY KEY CHECK (id <> ''),
    biome_id      text        NOT NULL,
    biome_version text        NOT NULL,
    digest_hash   text        NOT NULL,
    profile       text        NOT NULL,
    customize     json,
    approved_by   text        NOT NULL,
    approved_at   timestamptz NOT NULL,
    FOREIGN KEY (biome_id, biome_version) REFERENCES biome_versions (id, version)
);
CREATE INDEX grants_biome ON grants (biome_id, approved_at);

CREATE TABLE audit_log (
    id              text        PRIMARY KEY CHECK (id <> ''),
    time            timestamptz NOT NULL,
    ref             text        NOT NULL,
    subject_kind    text        NOT NULL,
    subject_ref     text        NOT NULL,
    environment     text        NOT NULL,
    decision        text        NOT NULL CHECK (decision <> ''),
    reasons         json,
    suggestions     json,
    obligations     json,
    bundle_revision text        NOT NULL,
    input_hash      text        NOT NULL,
    runner          text        NOT NULL,
    outcome         text        NOT NULL,
    latency_micros  bigint      NOT NULL,
    parent_id       text        NOT NULL,
    detail          json
);
CREATE INDEX audit_log_time ON audit_log (time);
CREATE INDEX audit_log_parent ON audit_log (parent_id) WHERE parent_id <> '';

-- The audit log is append-only: no row is ever changed or removed through SQL, whoever asks.
CREATE FUNCTION audit_log_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit_log is append-only: % refused', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END;
$$;
CREATE TRIGGER audit_log_no_update_delete BEFORE UPDATE OR DELETE ON audit_log
    FOR EACH ROW EXECUTE FUNCTION audit_log_append_only();
CREATE TRIGGER audit_log_no_truncate BEFORE TRUNCATE ON audit_log
    FOR EACH STATEMENT EXECUTE FUNCTION audit_log_append_only();
REVOKE UPDATE, DELETE, TRUNCATE ON audit_log FROM PUBLIC;

-- One row: bumped in the same transaction as every change the policy is compiled from.
-- Each bump is announced on channel xema_policy_revision so replicas rebuild without polling.
CREATE TABLE policy_revision (
    id       integer PRIMARY KEY CHECK (id = 1),
    revision bigint  NOT NULL
);
INSERT INTO policy_revision (id, revision) VALUES (1, 0);

CREATE FUNCTION policy_revision_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('xema_policy_revision', NEW.revision::text);
    RETURN NEW;
END;
$$;
CREATE TRIGGER policy_revision_notify AFTER UPDATE ON policy_revision
    FOR EACH ROW EXECUTE FUNCTION policy_revision_notify();
