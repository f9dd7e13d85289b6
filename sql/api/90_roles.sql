-- Ownership and least privilege: three NOLOGIN roles (docs/roles.md, docs/security.md).
--   skiplock_owner     owns the schema and everything in it (tables, sequences, views, types,
--                      functions): the SECURITY DEFINER functions run with its rights, not
--                      with those of whoever ran `migrate` (often a superuser). Not a
--                      superuser, no login; whoever migrates must be a member (or superuser).
--   skiplock_enqueuer  may call the enqueue-style functions and read skiplock.queue_stats,
--                      nothing else: no table privileges at all (the enqueue functions are
--                      SECURITY DEFINER, see sql/api/11_enqueue.sql).
--   skiplock_worker    what `skiplock worker` needs: rows of the skiplock tables, their
--                      sequences, every skiplock function, the migrations table (read); but
--                      the packet history only to read, packets never to delete, the
--                      limits in skiplock.settings and the queue controls in skiplock.queues
--                      only to read (the fetch politeness through skiplock.set_politeness).
--   skiplock_operator  what the console (`skiplock web`) needs: read every skiplock table and
--                      view; retry and cancel jobs (one or in bulk), move packets (take,
--                      complete, retry) and pack a host now, only through those functions
--                      (SECURITY DEFINER): no INSERT, UPDATE or DELETE on any table.
-- Re-applied by every `skiplock migrate`, after every other sql/api file, so it is idempotent
-- and also covers functions and tables that other files added.

-- Roles are cluster-wide: create them only if missing. Databases migrating at once (tests
-- run in parallel on one server) race on CREATE ROLE, and a migrating user without
-- CREATEROLE cannot create them at all: neither is an error (what needs a missing role is
-- skipped with a notice).
DO $roles$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['skiplock_owner', 'skiplock_enqueuer', 'skiplock_worker', 'skiplock_operator'] LOOP
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

-- Whoever migrates must be able to act as the owner: a user who can grant it (CREATEROLE)
-- becomes a member (superusers already are). Concurrent grants race like CREATE ROLE.
DO $member$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'skiplock_owner')
       AND NOT pg_catalog.pg_has_role(current_user, 'skiplock_owner', 'MEMBER') THEN
        BEGIN
            EXECUTE format('GRANT skiplock_owner TO %I', current_user);
        EXCEPTION
            WHEN duplicate_object OR unique_violation THEN NULL;
            WHEN insufficient_privilege OR invalid_grant_operation THEN
                RAISE NOTICE 'skiplock: % is not a member of skiplock_owner and cannot become one; the schema stays owned by its current owner (see docs/roles.md)', current_user;
        END;
    END IF;
END;
$member$;

-- Hand the schema and everything in it to skiplock_owner (a no-op once done: only objects
-- owned by someone else are altered, e.g. after an upgrade or what this migrate created).
DO $owner$
DECLARE
    own oid := (SELECT oid FROM pg_catalog.pg_roles WHERE rolname = 'skiplock_owner');
    ns oid := (SELECT oid FROM pg_catalog.pg_namespace WHERE nspname = 'skiplock');
    o record;
BEGIN
    IF own IS NULL OR NOT pg_catalog.pg_has_role(current_user, own, 'MEMBER') THEN
        RETURN;
    END IF;
    IF (SELECT nspowner FROM pg_catalog.pg_namespace WHERE oid = ns) <> own THEN
        EXECUTE 'ALTER SCHEMA skiplock OWNER TO skiplock_owner';
    END IF;
    -- Tables (their indexes, identity sequences and row types follow), views, and sequences
    -- that belong to no column.
    FOR o IN
        SELECT c.oid::regclass::text AS name,
               CASE c.relkind WHEN 'v' THEN 'VIEW' WHEN 'm' THEN 'MATERIALIZED VIEW'
                              WHEN 'S' THEN 'SEQUENCE' WHEN 'f' THEN 'FOREIGN TABLE' ELSE 'TABLE' END AS what
        FROM pg_catalog.pg_class c
        WHERE c.relnamespace = ns AND c.relowner <> own AND c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f')
          AND NOT (c.relkind = 'S' AND EXISTS (
                SELECT 1 FROM pg_catalog.pg_depend d
                WHERE d.classid = 'pg_catalog.pg_class'::regclass AND d.objid = c.oid AND d.deptype IN ('a', 'i')))
    LOOP
        EXECUTE format('ALTER %s %s OWNER TO skiplock_owner', o.what, o.name);
    END LOOP;
    -- Enums, domains, ranges and stand-alone composite types.
    FOR o IN
        SELECT t.oid::regtype::text AS name
        FROM pg_catalog.pg_type t
        WHERE t.typnamespace = ns AND t.typowner <> own
          AND (t.typtype IN ('e', 'd', 'r')
               OR (t.typtype = 'c' AND (SELECT c.relkind FROM pg_catalog.pg_class c WHERE c.oid = t.typrelid) = 'c'))
    LOOP
        EXECUTE format('ALTER TYPE %s OWNER TO skiplock_owner', o.name);
    END LOOP;
    FOR o IN
        SELECT p.oid::regprocedure::text AS name,
               CASE p.prokind WHEN 'p' THEN 'PROCEDURE' WHEN 'a' THEN 'AGGREGATE' ELSE 'FUNCTION' END AS what
        FROM pg_catalog.pg_proc p
        WHERE p.pronamespace = ns AND p.proowner <> own
    LOOP
        EXECUTE format('ALTER %s %s OWNER TO skiplock_owner', o.what, o.name);
    END LOOP;
END;
$owner$;

-- Functions are executable by PUBLIC by default: take that away from every skiplock
-- function (CREATE OR REPLACE keeps the ACL, so this also holds across migrations).
REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA skiplock FROM PUBLIC;

DO $grants$
DECLARE
    f text;
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'skiplock_enqueuer') THEN
        EXECUTE 'GRANT USAGE ON SCHEMA skiplock TO skiplock_enqueuer';
        EXECUTE 'GRANT SELECT ON skiplock.queue_stats TO skiplock_enqueuer';
        -- The CLI checks that every migration was applied, and the SQL API's version,
        -- before it enqueues.
        EXECUTE 'GRANT SELECT ON skiplock.migrations_core, skiplock.schema_info TO skiplock_enqueuer';
        -- The core's enqueue functions, by name, with every overload (each workflow part's
        -- roles file grants its own: sql/api/9*_roles.sql), and waiting for a job: a producer
        -- may make its jobs depend on, and wait for, any job whose id it knows (it learns
        -- that job's state and result; docs/roles.md, "Flows"), with the name of the channel
        -- a watched job's end is announced on. `signal` (docs/steps.md): a producer may signal
        -- any unfinished job whose id it knows; the signal carries its key scope, and a wait
        -- may take only some scopes' signals (docs/security.md, "Signals between tenants").
        FOR f IN
            SELECT p.oid::regprocedure::text
            FROM pg_catalog.pg_proc p
            JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
            WHERE n.nspname = 'skiplock'
              AND p.proname IN ('enqueue', 'enqueue_result', 'enqueue_many', 'enqueue_flow', 'enqueue_batch',
                                'watch', 'wait', 'flow_progress', 'finished_channel', 'signal')
        LOOP
            EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO skiplock_enqueuer', f);
        END LOOP;
    END IF;

    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'skiplock_worker') THEN
        EXECUTE 'GRANT USAGE ON SCHEMA skiplock TO skiplock_worker';
        EXECUTE 'GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA skiplock TO skiplock_worker';
        EXECUTE 'GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA skiplock TO skiplock_worker';
        EXECUTE 'GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA skiplock TO skiplock_worker';
        -- The limits are the owner's to set.
        EXECUTE 'REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON skiplock.settings FROM skiplock_worker';
        -- Which build installed each part is `skiplock migrate`'s to record, like the SQL
        -- API's version below; so are the reserved names.
        EXECUTE 'REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON skiplock.schema_parts, skiplock.reserved_names FROM skiplock_worker';
        -- Only `skiplock migrate` (the owner) records the SQL API's version.
        EXECUTE 'REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON skiplock.schema_info FROM skiplock_worker';
        -- The wake-up and finished channels' names are read (to LISTEN on them), never changed.
        EXECUTE 'REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON skiplock.wake_channel, skiplock.finished_channel FROM skiplock_worker';
        -- Queue control (limits, pause) is the owner's and the operator's, through the
        -- SECURITY DEFINER functions of sql/api/15_control.sql: a worker login may not delete
        -- or loosen a row, the fetch queue's politeness above all (it sets that one only
        -- through skiplock.set_politeness). UPDATE of updated_at alone stays: the limited claim
        -- locks the queue's row (SELECT ... FOR UPDATE needs UPDATE on some column) and
        -- writes nothing. The key-limit setters and the fairness switch go with it;
        -- set_queue_limit stays (the packet workflow sets its queue's concurrency at start, and
        -- it cannot remove a key limit).
        EXECUTE 'REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON skiplock.queues FROM skiplock_worker';
        EXECUTE 'REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON skiplock.queue_admission FROM skiplock_worker';
        EXECUTE 'GRANT UPDATE (updated_at) ON skiplock.queues TO skiplock_worker';
        FOR f IN
            SELECT p.oid::regprocedure::text
            FROM pg_catalog.pg_proc p
            JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
            WHERE n.nspname = 'skiplock' AND p.proname IN ('set_key_limit', 'change_key_limit', 'set_queue_fairness', 'set_queue_admission')
        LOOP
            EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM skiplock_worker', f);
        END LOOP;
    END IF;

    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'skiplock_operator') THEN
        EXECUTE 'GRANT USAGE ON SCHEMA skiplock TO skiplock_operator';
        -- Read everything (tables and views); write nothing directly. Re-applied by every
        -- migrate, so a table added later is readable too.
        EXECUTE 'GRANT SELECT ON ALL TABLES IN SCHEMA skiplock TO skiplock_operator';
        EXECUTE 'REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON ALL TABLES IN SCHEMA skiplock FROM skiplock_operator';
        -- Except the wake-up channel's name: the console does not LISTEN, and whoever knows
        -- the name hears every queue's wake-ups (migrations/history/0015_wake_channel.sql).
        EXECUTE 'REVOKE SELECT ON skiplock.wake_channel FROM skiplock_operator';
        -- The console's buttons (every one SECURITY DEFINER) and the filter helpers its job
        -- list shares with the bulk functions; by name, with every overload. `signal`: an
        -- operator answers a job's wait (an approval) as it may cancel or retry the job; the
        -- signal carries the operator login's key scope (docs/steps.md, "Signals").
        FOR f IN
            SELECT p.oid::regprocedure::text
            FROM pg_catalog.pg_proc p
            JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
            WHERE n.nspname = 'skiplock'
              AND p.proname IN ('cancel', 'retry', 'cancel_jobs', 'retry_jobs',
                                'cancel_by_key', 'reschedule', 'hold_key',
                                'flow_progress', 'flow_members', 'dependency_results', 'dependents',
                                'dependency_counts', 'finished_channel',
                                'pause_queue', 'resume_queue', 'signal',
                                '_job_matches', '_like_pattern')
        LOOP
            EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO skiplock_operator', f);
        END LOOP;
    END IF;
END;
$grants$;
