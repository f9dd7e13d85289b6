-- The fetch workflow's grants (applied by every program, after sql/api/90_roles.sql, which
-- made the roles and granted the core's): an enqueuer may request fetches.
DO $grants$
DECLARE
    f text;
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'skiplock_enqueuer') THEN
        FOR f IN
            SELECT p.oid::regprocedure::text
            FROM pg_catalog.pg_proc p
            JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
            WHERE n.nspname = 'skiplock' AND p.proname IN ('request_fetch')
        LOOP
            EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO skiplock_enqueuer', f);
        END LOOP;
    END IF;
END;
$grants$;
