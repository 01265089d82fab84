-- MCP Tasks (docs/approvals.md): a held call is its requester's task. withdrawn is a new
-- terminal state (its requester cancelled it while it was pending; it never runs), and
-- answer keeps the answer the run gave, {"status": N, "body": {...}}, so a task and an
-- idempotent retry return exactly what a synchronous call would have answered.
ALTER TABLE approvals DROP CONSTRAINT approvals_status_check;
ALTER TABLE approvals ADD CONSTRAINT approvals_status_check CHECK (status IN ('pending', 'approved', 'rejected', 'expired',
    'running', 'dispatched', 'done', 'failed', 'interrupted', 'withdrawn'));
ALTER TABLE approvals ADD COLUMN answer json;
