-- The pack workflow's grants (applied by every program, after sql/api/90_roles.sql): an
-- enqueuer may reset a host's pack timer or ask for a pack now; an operator may ask for a
-- pack now (the console's button).
DO $grants$
DECLARE
    f text;
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'skiplock_enqueuer') THEN
        FOR f IN
            SELECT p.oid::regprocedure::text
            FROM pg_catalog.pg_proc p
            JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
            WHERE n.nspname = 'skiplock' AND p.proname IN ('timer_reset', 'pack_now')
        LOOP
            EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO skiplock_enqueuer', f);
        END LOOP;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'skiplock_operator') THEN
        FOR f IN
            SELECT p.oid::regprocedure::text
            FROM pg_catalog.pg_proc p
            JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
            WHERE n.nspname = 'skiplock' AND p.proname IN ('pack_now')
        LOOP
            EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO skiplock_operator', f);
        END LOOP;
    END IF;
END;
$grants$;
