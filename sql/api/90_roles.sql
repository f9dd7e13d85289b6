-- Least privilege: two NOLOGIN roles to grant to login users (docs/roles.md).
--   skiplock_enqueuer  may call the enqueue-style functions and read skiplock.queue_stats,
--                      nothing else: no table privileges at all (the enqueue functions are
--                      SECURITY DEFINER, see sql/api/10_core.sql).
--   skiplock_worker    what `skiplock worker` needs: rows of the skiplock tables, their
--                      sequences, every skiplock function, the migrations table (read).
-- Re-applied by every `skiplock migrate`, after every other sql/api file, so it is idempotent
-- and also covers functions and tables that other files added.

-- Roles are cluster-wide: create them only if missing. Two databases migrating at once may
-- race on CREATE ROLE, and a migrating user without CREATEROLE cannot create them at all:
-- neither is an error (the grants below are skipped for a role that does not exist).
DO $roles$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['skiplock_enqueuer', 'skiplock_worker'] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = r) THEN
            BEGIN
                EXECUTE format('CREATE ROLE %I NOLOGIN', r);
            EXCEPTION
                WHEN duplicate_object OR unique_violation THEN NULL;
                WHEN insufficient_privilege THEN
                    RAISE NOTICE 'skiplock: cannot create role % (no CREATEROLE); grants skipped', r;
            END;
        END IF;
    END LOOP;
END;
$roles$;

-- Functions are executable by PUBLIC by default: take that away from every skiplock
-- function (CREATE OR REPLACE keeps the ACL, so this also holds across migrations).
REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA skiplock FROM PUBLIC;

DO $grants$
DECLARE
    f text;
    mig regclass := pg_catalog.to_regclass('_sqlx_migrations');
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'skiplock_enqueuer') THEN
        EXECUTE 'GRANT USAGE ON SCHEMA skiplock TO skiplock_enqueuer';
        EXECUTE 'GRANT SELECT ON skiplock.queue_stats TO skiplock_enqueuer';
        -- The CLI checks that every migration was applied before it enqueues.
        IF mig IS NOT NULL THEN
            EXECUTE format('GRANT SELECT ON %s TO skiplock_enqueuer', mig);
        END IF;
        -- The enqueue-style functions that exist now (the workflow ones may not, yet), by
        -- name, with every overload.
        FOR f IN
            SELECT p.oid::regprocedure::text
            FROM pg_catalog.pg_proc p
            JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
            WHERE n.nspname = 'skiplock'
              AND p.proname IN ('enqueue', 'enqueue_many', 'request_fetch', 'timer_reset',
                                'pack_now', 'submit_packet')
        LOOP
            EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO skiplock_enqueuer', f);
        END LOOP;
    END IF;

    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'skiplock_worker') THEN
        EXECUTE 'GRANT USAGE ON SCHEMA skiplock TO skiplock_worker';
        EXECUTE 'GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA skiplock TO skiplock_worker';
        EXECUTE 'GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA skiplock TO skiplock_worker';
        EXECUTE 'GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA skiplock TO skiplock_worker';
        -- The worker checks at start that every migration was applied.
        IF mig IS NOT NULL THEN
            EXECUTE format('GRANT SELECT ON %s TO skiplock_worker', mig);
        END IF;
    END IF;
END;
$grants$;
