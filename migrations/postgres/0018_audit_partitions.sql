-- The audit log partitioned by time (issue 28): a prune drops whole partitions instead of
-- deleting their rows one by one (docs/operations.md, "Audit retention and archives").
--
-- audit_log becomes a table partitioned by range of time, one partition per UTC day
-- (audit_log_pYYYYMMDD, created ahead of time by audit_log_add_partitions), plus a DEFAULT
-- partition that takes any row no day partition covers, so an append never fails for a
-- missing partition. The existing table is not copied: it becomes the partition
-- audit_log_legacy of every time before the end of the UTC day of its newest row (dropped
-- instead when it is empty), its indexes reused as the partitioned ones' (ATTACH validates it with one scan, and builds
-- the new primary key on it). The primary key is (id, time): a partitioned table's unique
-- keys must hold its partition key. A record appended again (the spool's retry) is still
-- refused; ids are random, so two records of one id do not otherwise arise.
--
-- A partition is dropped only through audit_log_drop_partition, which drops it only when
-- every row of it lies beneath the prune checkpoints, the rule the append-only trigger
-- enforces for a delete (0016).
DO $$
DECLARE
    idx  record;
    def  text;
    defs text[] := '{}';
    ends timestamp; -- UTC
BEGIN
    -- The indexes, re-created on the partitioned table under their names (matching indexes
    -- of the attached table are adopted, not rebuilt).
    FOR idx IN SELECT c.relname AS name, pg_get_indexdef(c.oid) AS def
        FROM pg_index x JOIN pg_class c ON c.oid = x.indexrelid
        WHERE x.indrelid = 'audit_log'::regclass AND NOT x.indisprimary
    LOOP
        defs := defs || idx.def;
        EXECUTE format('ALTER INDEX %I RENAME TO %I', idx.name, idx.name || '_legacy');
    END LOOP;
    ALTER TABLE audit_log RENAME TO audit_log_legacy;
    ALTER TABLE audit_log_legacy DROP CONSTRAINT audit_log_pkey;
    -- The row trigger is cloned onto every partition from the parent's; the TRUNCATE one
    -- (statement level, not cloned) stays on each partition.
    DROP TRIGGER audit_log_no_update_delete ON audit_log_legacy;

    CREATE TABLE audit_log (LIKE audit_log_legacy INCLUDING DEFAULTS INCLUDING CONSTRAINTS,
        PRIMARY KEY (id, time)) PARTITION BY RANGE (time);
    FOREACH def IN ARRAY defs LOOP
        EXECUTE def; -- taken while the table was audit_log: its text names the new one
    END LOOP;

    SELECT date_trunc('day', max(time) AT TIME ZONE 'UTC') + interval '1 day' INTO ends FROM audit_log_legacy;
    IF ends IS NULL THEN -- an empty log (a new install): nothing to keep
        DROP TABLE audit_log_legacy;
    ELSE
        EXECUTE format('ALTER TABLE audit_log ATTACH PARTITION audit_log_legacy FOR VALUES FROM (MINVALUE) TO (%L)',
            (ends AT TIME ZONE 'UTC')::timestamptz);
    END IF;
END;
$$;

CREATE TRIGGER audit_log_no_update_delete BEFORE UPDATE OR DELETE ON audit_log
    FOR EACH ROW EXECUTE FUNCTION audit_log_append_only();
CREATE TRIGGER audit_log_no_truncate BEFORE TRUNCATE ON audit_log
    FOR EACH STATEMENT EXECUTE FUNCTION audit_log_append_only();
REVOKE UPDATE, DELETE, TRUNCATE ON audit_log FROM PUBLIC;

CREATE TABLE audit_log_default PARTITION OF audit_log DEFAULT;
CREATE TRIGGER audit_log_no_truncate BEFORE TRUNCATE ON audit_log_default
    FOR EACH STATEMENT EXECUTE FUNCTION audit_log_append_only();
REVOKE UPDATE, DELETE, TRUNCATE ON audit_log_default FROM PUBLIC;

-- The end of a partition's range (NULL for the DEFAULT partition or a table that is not a
-- partition of audit_log).
CREATE FUNCTION audit_log_partition_end(part regclass) RETURNS timestamptz LANGUAGE sql STABLE AS $$
    SELECT substring(pg_get_expr(c.relpartbound, c.oid) FROM 'TO \(''([^'']*)''\)')::timestamptz
    FROM pg_class c JOIN pg_inherits i ON i.inhrelid = c.oid
    WHERE c.oid = part AND i.inhparent = 'audit_log'::regclass
$$;

-- Creates the day partitions of the UTC days [from_day, from_day + days) that do not exist yet and
-- returns how many it created. A day another partition covers (audit_log_legacy), or whose
-- rows the DEFAULT partition holds already (a clock far ahead), is skipped: its rows stay in
-- the DEFAULT partition, which prunes by deletes. Each is created apart and then attached,
-- which takes only a SHARE UPDATE EXCLUSIVE lock on audit_log: appends go on.
CREATE FUNCTION audit_log_add_partitions(from_day date, days integer) RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    d       date;
    part    text;
    created integer := 0;
BEGIN
    PERFORM pg_advisory_xact_lock(7305916247); -- replicas creating the same days take turns
    FOR i IN 0 .. days - 1 LOOP
        d := from_day + i;
        part := 'audit_log_p' || to_char(d, 'YYYYMMDD');
        CONTINUE WHEN to_regclass(part) IS NOT NULL;
        BEGIN
            EXECUTE format('CREATE TABLE %I (LIKE audit_log INCLUDING DEFAULTS INCLUDING CONSTRAINTS)', part);
            EXECUTE format('ALTER TABLE audit_log ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)', part,
                (d::timestamp AT TIME ZONE 'UTC'), ((d + 1)::timestamp AT TIME ZONE 'UTC'));
            EXECUTE format('CREATE TRIGGER audit_log_no_truncate BEFORE TRUNCATE ON %I
                FOR EACH STATEMENT EXECUTE FUNCTION audit_log_append_only()', part);
            EXECUTE format('REVOKE UPDATE, DELETE, TRUNCATE ON %I FROM PUBLIC', part);
            created := created + 1;
        EXCEPTION WHEN invalid_object_definition OR check_violation THEN
            -- overlaps another partition, or the DEFAULT partition holds rows of the day
            -- (the subtransaction's CREATE TABLE is rolled back with it)
        END;
    END LOOP;
    RETURN created;
END;
$$;

-- Returns a chain holding a record of part above its chain's prune checkpoint (the first
-- such chain id), or NULL when every chained record of part lies beneath the checkpoints.
-- The chains of part are walked through its chain index, one probe each.
CREATE FUNCTION audit_log_partition_above(part regclass) RETURNS text LANGUAGE plpgsql STABLE AS $$
DECLARE
    found text;
BEGIN
    EXECUTE format($q$
        WITH RECURSIVE chains (chain_id) AS (
            (SELECT chain_id FROM %1$s WHERE chain_id <> '' ORDER BY chain_id LIMIT 1)
            UNION ALL
            SELECT (SELECT p.chain_id FROM %1$s p WHERE p.chain_id > c.chain_id AND p.chain_id <> '' ORDER BY p.chain_id LIMIT 1)
            FROM chains c WHERE c.chain_id IS NOT NULL)
        SELECT c.chain_id FROM chains c WHERE c.chain_id IS NOT NULL
            AND (SELECT max(p.chain_seq) FROM %1$s p WHERE p.chain_id = c.chain_id AND p.chain_id <> '')
              > COALESCE((SELECT h.base_seq FROM audit_chain_heads h WHERE h.chain_id = c.chain_id), 0)
        LIMIT 1$q$, part) INTO found;
    RETURN found;
END;
$$;

-- Drops the day (or legacy) partition part when all of it lies beneath the prune
-- checkpoints: its range ends at or before the prune boundary (so its unchained records
-- are beneath it) and no chained record of it is above its chain's base. Checked and dropped
-- under an ACCESS EXCLUSIVE lock on audit_log (which DROP takes anyway), so no append lands in
-- between; the caller bounds the wait for it with lock_timeout. Anything else is refused.
CREATE FUNCTION audit_log_drop_partition(part regclass) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    ends   timestamptz := audit_log_partition_end(part);
    before timestamptz := (SELECT pruned_before FROM audit_prune WHERE id = 1);
    above  text;
BEGIN
    IF ends IS NULL OR before IS NULL OR ends > before THEN
        RAISE EXCEPTION 'audit_log partition % is not beneath the prune boundary', part
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    LOCK TABLE audit_log IN ACCESS EXCLUSIVE MODE;
    above := audit_log_partition_above(part);
    IF above IS NOT NULL THEN
        RAISE EXCEPTION 'audit_log partition % holds records of chain % above its prune checkpoint', part, above
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    EXECUTE format('DROP TABLE %s', part);
END;
$$;
