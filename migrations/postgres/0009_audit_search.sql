-- Audit search (GET /v1/audit): one org's records newest first, by subject or by ref, each
-- served by an index instead of a scan of the org's log (audit_log_org_time serves the rest).
CREATE INDEX audit_log_org_subject_time ON audit_log (org, subject_ref, time, id);
CREATE INDEX audit_log_org_ref_time ON audit_log (org, ref, time, id);
