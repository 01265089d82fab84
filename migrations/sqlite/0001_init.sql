-- Times are INTEGER microseconds since the Unix epoch (UTC); JSON columns are TEXT checked
-- with json_valid.

CREATE TABLE biome_versions (
    seq           INTEGER PRIMARY KEY AUTOINCREMENT,
    id            TEXT    NOT NULL CHECK (id <> ''),
    version       TEXT    NOT NULL CHECK (version <> ''),
    manifest      TEXT    NOT NULL CHECK (json_valid(manifest)),
    contributions TEXT    CHECK (contributions IS NULL OR json_valid(contributions)),
    content_hash  TEXT    NOT NULL CHECK (content_hash <> ''),
    digest_hash   TEXT    NOT NULL,
    digest        TEXT    CHECK (digest IS NULL OR json_valid(digest)),
    created_at    INTEGER NOT NULL,
    UNIQUE (id, version)
);

CREATE TABLE capabilities (
    ref           TEXT    PRIMARY KEY CHECK (ref <> ''),
    biome_id      TEXT    NOT NULL CHECK (biome_id <> ''),
    biome_version TEXT    NOT NULL,
    manifest      TEXT    NOT NULL CHECK (json_valid(manifest)),
    invocation    TEXT    CHECK (invocation IS NULL OR json_valid(invocation)),
    runner_kind   TEXT    NOT NULL,
    lifecycle     TEXT    NOT NULL CHECK (lifecycle IN ('proposed', 'seeded', 'published', 'deprecated', 'retired')),
    replaced_by   TEXT    NOT NULL DEFAULT '',
    updated_at    INTEGER NOT NULL
);
CREATE INDEX capabilities_biome ON capabilities (biome_id, biome_version);

CREATE TABLE lifecycle_events (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    ref         TEXT    NOT NULL REFERENCES capabilities (ref),
    from_state  TEXT    NOT NULL CHECK (from_state IN ('proposed', 'seeded', 'published', 'deprecated', 'retired')),
    to_state    TEXT    NOT NULL CHECK (to_state IN ('proposed', 'seeded', 'published', 'deprecated', 'retired')),
    replaced_by TEXT    NOT NULL DEFAULT '',
    actor       TEXT    NOT NULL,
    at          INTEGER NOT NULL
);
CREATE INDEX lifecycle_events_ref ON lifecycle_events (ref, seq);

CREATE TABLE grants (
    id            TEXT    PRIMARY KEY CHECK (id <> ''),
    biome_id      TEXT    NOT NULL,
    biome_version TEXT    NOT NULL,
    digest_hash   TEXT    NOT NULL,
    profile       TEXT    NOT NULL,
    customize     TEXT    CHECK (customize IS NULL OR json_valid(customize)),
    approved_by   TEXT    NOT NULL,
    approved_at   INTEGER NOT NULL,
    FOREIGN KEY (biome_id, biome_version) REFERENCES biome_versions (id, version)
);
CREATE INDEX grants_biome ON grants (biome_id, approved_at);

CREATE TABLE audit_log (
    id              TEXT    PRIMARY KEY CHECK (id <> ''),
    time            INTEGER NOT NULL,
    ref             TEXT    NOT NULL,
    subject_kind    TEXT    NOT NULL,
    subject_ref     TEXT    NOT NULL,
    environment     TEXT    NOT NULL,
    decision        TEXT    NOT NULL CHECK (decision <> ''),
    reasons         TEXT    CHECK (reasons IS NULL OR json_valid(reasons)),
    suggestions     TEXT    CHECK (suggestions IS NULL OR json_valid(suggestions)),
    obligations     TEXT    CHECK (obligations IS NULL OR json_valid(obligations)),
    bundle_revision TEXT    NOT NULL,
    input_hash      TEXT    NOT NULL,
    runner          TEXT    NOT NULL,
    outcome         TEXT    NOT NULL,
    latency_micros  INTEGER NOT NULL,
    parent_id       TEXT    NOT NULL,
    detail          TEXT    CHECK (detail IS NULL OR json_valid(detail))
);
CREATE INDEX audit_log_time ON audit_log (time);
CREATE INDEX audit_log_parent ON audit_log (parent_id) WHERE parent_id <> '';

-- The audit log is append-only: no row is ever changed or removed through SQL.
CREATE TRIGGER audit_log_no_update BEFORE UPDATE ON audit_log
BEGIN
    SELECT RAISE(ABORT, 'audit_log is append-only');
END;
CREATE TRIGGER audit_log_no_delete BEFORE DELETE ON audit_log
BEGIN
    SELECT RAISE(ABORT, 'audit_log is append-only');
END;

-- One row: bumped in the same transaction as every change the policy is compiled from.
CREATE TABLE policy_revision (
    id       INTEGER PRIMARY KEY CHECK (id = 1),
    revision INTEGER NOT NULL
);
INSERT INTO policy_revision (id, revision) VALUES (1, 0);
