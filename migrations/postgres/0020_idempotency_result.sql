-- An idempotency key keeps its first call's outcome in the domain's terms (result: what the
-- funnel returned, JSON), and the answer is made of it when replayed. status and body, the
-- answer as sent, are still written for one release so previous-release replicas replay
-- keys the new ones completed (expand/contract); the next release drops them.
ALTER TABLE idempotency_keys ADD COLUMN result text;

-- A previous-release replica taking over an expired key sets it running and clears status
-- and body, not result: the trigger clears it, so the key's next answer is never the
-- earlier call's result. Dropped with status and body.
CREATE FUNCTION idempotency_keys_running_has_no_result() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.result := NULL;
    RETURN NEW;
END;
$$;
-- Only such an update runs it: completing a key (every keyed call) does not.
CREATE TRIGGER idempotency_keys_running_has_no_result BEFORE UPDATE ON idempotency_keys
    FOR EACH ROW WHEN (NEW.state = 'running' AND NEW.result IS NOT NULL)
    EXECUTE FUNCTION idempotency_keys_running_has_no_result();
