-- The refusal of a stored id stops the statement (FAIL) instead of rolling it back (ABORT).
-- With every constraint of the store's audit INSERT resolved by FAIL too (INSERT OR FAIL), no
-- part of that statement may roll back on its own, so SQLite keeps no statement journal for it:
-- the store rolls back the whole transaction on any error. Nothing else changes: this
-- BEFORE INSERT trigger still runs before conflict resolution and refuses every insert naming
-- a stored id, whatever its conflict clause, before the insert of that row changes anything.
DROP TRIGGER audit_log_no_replace;
CREATE TRIGGER audit_log_no_replace BEFORE INSERT ON audit_log
WHEN EXISTS (SELECT 1 FROM audit_log WHERE id = NEW.id)
BEGIN
    SELECT RAISE(FAIL, 'audit_log is append-only: the id exists');
END;
