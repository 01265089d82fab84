-- Orgs are tenants: grants, held calls and audit records belong to an org, and a biome id
-- belongs to the org that first submitted it ('' = the operator's own store). Rows written
-- before tenancy were all made by the single development org, 'default'.
ALTER TABLE grants ADD COLUMN org TEXT NOT NULL DEFAULT 'default' CHECK (org <> '');
CREATE INDEX grants_org ON grants (org, biome_id, approved_at);

ALTER TABLE approvals ADD COLUMN org TEXT NOT NULL DEFAULT 'default' CHECK (org <> '');
CREATE INDEX approvals_org ON approvals (org, status, created_at);

-- '' for records of no org (a request refused before its token named one).
ALTER TABLE audit_log ADD COLUMN org TEXT NOT NULL DEFAULT 'default';
CREATE INDEX audit_log_org_time ON audit_log (org, time);

CREATE TABLE biome_owners (
    id         TEXT    PRIMARY KEY CHECK (id <> ''),
    org        TEXT    NOT NULL,
    created_at INTEGER NOT NULL
);
INSERT INTO biome_owners (id, org, created_at) SELECT id, '', MIN(created_at) FROM biome_versions GROUP BY id;
