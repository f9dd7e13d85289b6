-- Every optional part's grants (skiplock.schema_parts.grants, core migration 0018), applied
-- by every program after sql/api/90_roles.sql, which made the roles and re-granted the worker
-- role every table: a program built without a part must not undo what the part took back
-- (the packet history is append-only for the worker role). `skiplock migrate` writes the
-- column (the owner's: the worker role may not change skiplock.schema_parts), from the part's
-- own grants file; each file does nothing for a role that does not exist.
DO $part_grants$
DECLARE
    g record;
BEGIN
    FOR g IN SELECT p.part, p.grants FROM skiplock.schema_parts p
             WHERE p.grants IS NOT NULL ORDER BY p.part LOOP
        EXECUTE g.grants;
    END LOOP;
END;
$part_grants$;
