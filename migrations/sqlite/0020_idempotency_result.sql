-- An idempotency key keeps its first call's outcome in the domain's terms (result: what the
-- funnel returned, JSON), and the answer is made of it when replayed. status and body, the
-- answer as sent, are still written for one release so a previous release run on this file
-- again (a rollback) replays keys this one completed (expand/contract); the next release
-- drops them.
ALTER TABLE idempotency_keys ADD COLUMN result TEXT;

-- A previous release taking over an expired key sets it running and clears status and body,
-- not result: the trigger clears it, so the key's next answer is never the earlier call's
-- result. Dropped with status and body.
CREATE TRIGGER idempotency_keys_running_has_no_result AFTER UPDATE ON idempotency_keys
    WHEN NEW.state = 'running' AND NEW.result IS NOT NULL
BEGIN
    UPDATE idempotency_keys SET result = NULL
        WHERE org = NEW.org AND subject = NEW.subject AND key = NEW.key;
END;
