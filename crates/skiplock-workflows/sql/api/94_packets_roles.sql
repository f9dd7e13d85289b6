-- The packet pipeline's grants (after sql/api/90_roles.sql, which granted the worker role
-- every table; applied by every program, and nothing here is done for a database without the
-- packet pipeline): the packet history is append-only (its trigger writes it as the owner; a
-- trigger also refuses changes by anyone else), and deleting a packet would delete its
-- history, so a worker login may do neither; an enqueuer may submit packets; an operator may
-- take, complete and retry them (the console's buttons).
DO $grants$
DECLARE
    f text;
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'skiplock_worker')
       AND pg_catalog.to_regclass('skiplock.packet_events') IS NOT NULL THEN
        EXECUTE 'REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON skiplock.packet_events FROM skiplock_worker';
        EXECUTE 'REVOKE DELETE, TRUNCATE ON skiplock.packets FROM skiplock_worker';
    END IF;
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'skiplock_enqueuer') THEN
        FOR f IN
            SELECT p.oid::regprocedure::text
            FROM pg_catalog.pg_proc p
            JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
            WHERE n.nspname = 'skiplock' AND p.proname IN ('submit_packet')
        LOOP
            EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO skiplock_enqueuer', f);
        END LOOP;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'skiplock_operator') THEN
        FOR f IN
            SELECT p.oid::regprocedure::text
            FROM pg_catalog.pg_proc p
            JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
            WHERE n.nspname = 'skiplock' AND p.proname IN ('take_packet', 'complete_packet', 'retry_packet')
        LOOP
            EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO skiplock_operator', f);
        END LOOP;
    END IF;
END;
$grants$;
