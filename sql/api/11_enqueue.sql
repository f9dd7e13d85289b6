-- skiplock core SQL API: enqueue from any language: the checks of a job, keys and key scopes, what an enqueue does
-- (skiplock._enqueue_outcome), and skiplock.enqueue, enqueue_result, enqueue_many.
-- Installed (CREATE OR REPLACE) by `skiplock migrate` after the schema migrations, in the order of
-- src/store/schema.rs (api_files).

-- The rule of the statements that send running jobs back to `available` (sql/queue/ack_many.sql,
-- rescue.sql, release_unstarted.sql): for the jobs one statement sends back (`ids`, their
-- `keys`, and whether each really goes back rather than being discarded), the job that
-- supersedes each keyed one: an available job of its kind and queue holding its key, else
-- the newest job of the statement going back with it (of the same kind and queue). NULL: none (the job goes back). The statements cancel a
-- superseded job instead, with the reason in its errors, so the work runs once.
CREATE OR REPLACE FUNCTION skiplock._superseded_by(ids bigint[], keys text[], back boolean[])
RETURNS TABLE (id bigint, holder bigint) LANGUAGE sql STABLE AS $$
    -- A key is shared only by jobs of one kind and queue (the unique index, migrations/
    -- 0013_enqueue_namespaces.sql): each keyed job's kind and queue, read from the statement's
    -- snapshot (before it updates the rows), scope both the holder and the partition.
    SELECT k.id,
           CASE WHEN k.back AND k.key IS NOT NULL THEN
               coalesce((SELECT o.id FROM skiplock.jobs o
                         WHERE o.kind = s.kind AND o.queue = s.queue AND o.unique_key = k.key
                           AND o.state IN ('available', 'waiting') AND o.id <> k.id
                         LIMIT 1),
                        nullif(max(k.id) FILTER (WHERE k.back) OVER (PARTITION BY s.kind, s.queue, k.key), k.id))
           END
    FROM unnest(ids, keys, back) AS k(id, key, back)
    LEFT JOIN LATERAL (SELECT j.kind, j.queue FROM skiplock.jobs j
                       WHERE j.id = k.id AND k.key IS NOT NULL) s ON true
$$;

-- The `errors` entry of a job of attempt `attempt` superseded by job `holder` on `key`, as a
-- one-element array to append (empty when `holder` is NULL: not superseded).
CREATE OR REPLACE FUNCTION skiplock._superseded_entry(attempt integer, holder bigint, key text)
RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN holder IS NULL THEN '[]'::jsonb
                ELSE jsonb_build_array(jsonb_build_object(
                    'attempt', attempt, 'at', now(),
                    'error', format('superseded: job %s already waits with unique_key %s', holder, key)))
           END
$$;

-- Why a worker could not read these args (or meta), or NULL when it can. Valid jsonb is not
-- always JSON that serde_json (which reads every job's args and meta: src/queue/args.rs)
-- accepts: it refuses 128 or more nested arrays/objects (its recursion limit) and numbers it
-- reads as outside the range of an f64. Such args would be discarded by the worker ("invalid
-- args …"), so enqueue refuses them at once, naming the problem (tests/bad_input.rs
-- enqueue_refuses_args_serde_json_cannot_read_naming_the_problem). A container at level 127
-- (the root object is level 0) is the 128th nested one. Two scans of the document, without a
-- query: about a microsecond for a small job (docs/reliability.md, "Bad args").
--
-- The number bound is the decoder's, not the float's: Postgres sends a jsonb number as plain
-- decimal digits (1.7976931348623157e308, f64::MAX's shortest form, as 309 digits), and
-- serde_json's parser keeps the first 20 digits as an integer and scales it by one power of
-- ten, which overflows from 17976931348623156225 followed by 289 zeros on. Every magnitude
-- below that decodes; that one and above do not (the unit test
-- `serde_json_reads_the_numbers_postgres_prints_below_the_bound_enqueue_enforces` checks
-- this bound against serde_json itself).
CREATE OR REPLACE FUNCTION skiplock._unreadable_args(args jsonb) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN jsonb_path_exists(args, 'strict $.**{127} ? (@.type() == "object" || @.type() == "array")')
            THEN 'are nested 128 or more levels deep (a worker reads at most 127 nested arrays and objects)'
        WHEN jsonb_path_exists(args, 'strict $.** ? (@.type() == "number" && (@ >= 1.7976931348623156225e308 || @ <= -1.7976931348623156225e308))')
            THEN 'hold a number outside the range of a 64-bit float as a worker reads it (a magnitude below 1.7976931348623156225e308)'
    END
$$;

-- Validation shared by every enqueue path: one clear error per kind of bad input.
CREATE OR REPLACE FUNCTION skiplock._check_job(kind text, args jsonb, queue text, priority smallint, max_attempts integer)
RETURNS void LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF kind IS NULL OR kind = '' THEN
        RAISE EXCEPTION 'skiplock: job kind must not be empty' USING ERRCODE = '22023';
    END IF;
    IF length(kind) > 200 THEN
        RAISE EXCEPTION 'skiplock: job kind is % characters long (at most 200)', length(kind) USING ERRCODE = '22023';
    END IF;
    IF queue IS NULL OR queue = '' OR length(queue) > 200 THEN
        RAISE EXCEPTION 'skiplock: queue name must be 1 to 200 characters' USING ERRCODE = '22023';
    END IF;
    IF args IS NULL OR jsonb_typeof(args) <> 'object' THEN
        RAISE EXCEPTION 'skiplock: job args must be a JSON object, got %', coalesce(jsonb_typeof(args), 'NULL') USING ERRCODE = '22023';
    END IF;
    IF octet_length(args::text) > 524288 THEN
        RAISE EXCEPTION 'skiplock: job args are % bytes (at most 524288)', octet_length(args::text) USING ERRCODE = '22023';
    END IF;
    IF skiplock._unreadable_args(args) IS NOT NULL THEN
        RAISE EXCEPTION 'skiplock: job args %', skiplock._unreadable_args(args) USING ERRCODE = '22023';
    END IF;
    IF max_attempts IS NULL OR max_attempts < 1 THEN
        RAISE EXCEPTION 'skiplock: max_attempts must be at least 1, got %', max_attempts USING ERRCODE = '22023';
    END IF;
    IF priority IS NULL THEN
        RAISE EXCEPTION 'skiplock: priority must not be NULL' USING ERRCODE = '22023';
    END IF;
END;
$$;

-- Refuses a limit_key skiplock cannot use (NULL passes: the job is not key-limited).
CREATE OR REPLACE FUNCTION skiplock._check_limit_key(limit_key text)
RETURNS void LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF limit_key = '' THEN
        RAISE EXCEPTION 'skiplock: limit_key must not be empty (NULL: no key)' USING ERRCODE = '22023';
    END IF;
    IF octet_length(limit_key) > 1000 THEN
        RAISE EXCEPTION 'skiplock: limit_key is % bytes long (at most 1000)', octet_length(limit_key)
            USING ERRCODE = '22023';
    END IF;
END;
$$;

-- When a job of `queue` with `limit_key`, asked to run at `run_at` (NULL: now), is due: no
-- earlier than the end of a hold of its key (skiplock.hold_key). One probe of
-- skiplock.key_holds' primary key; the enqueue functions call it for keyed jobs only, and the
-- ack for a job going back (a retry or a snooze; a NULL key finds no hold).
CREATE OR REPLACE FUNCTION skiplock._due_after_hold(queue text, limit_key text, run_at timestamptz)
RETURNS timestamptz LANGUAGE sql STABLE AS $$
    SELECT greatest(coalesce(run_at, now()),
                    (SELECT h.until FROM skiplock.key_holds h
                     WHERE h.queue = _due_after_hold.queue AND h.limit_key = _due_after_hold.limit_key
                       AND h.until > now()))
$$;

-- Refuses a meta skiplock will not store (NULL passes: none): a JSON object of at most 64 KiB
-- that a worker can read (skiplock._unreadable_args).
CREATE OR REPLACE FUNCTION skiplock._check_meta(meta jsonb)
RETURNS void LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF meta IS NOT NULL AND jsonb_typeof(meta) <> 'object' THEN
        RAISE EXCEPTION 'skiplock: meta must be a JSON object, got %', jsonb_typeof(meta) USING ERRCODE = '22023';
    END IF;
    IF octet_length(meta::text) > 65536 THEN
        RAISE EXCEPTION 'skiplock: meta is % bytes long (at most 65536)', octet_length(meta::text) USING ERRCODE = '22023';
    END IF;
    IF skiplock._unreadable_args(meta) IS NOT NULL THEN
        RAISE EXCEPTION 'skiplock: meta %', skiplock._unreadable_args(meta) USING ERRCODE = '22023';
    END IF;
END;
$$;

-- Refuses a time skiplock cannot store (the range is skiplock._time_ok, migrations/history/0006):
-- NULL passes (callers coalesce it to now()), 'infinity', '-infinity' and absurd years do not.
-- The wording matches src/time/mod.rs.
CREATE OR REPLACE FUNCTION skiplock._check_time(what text, t timestamptz)
RETURNS void LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF NOT skiplock._time_ok(t) THEN
        RAISE EXCEPTION 'skiplock: % must be a finite time from 1970-01-01 to 9999-12-31 (UTC), got %', what, t
            USING ERRCODE = '22023';
    END IF;
END;
$$;

-- Reserved names (skiplock._reserved_key_prefix, skiplock._reserved_job): built from
-- skiplock.reserved_names by sql/api/80_reserved.sql, after every part has written its rows.

-- Refuses a job of a reserved queue or kind (skiplock._reserved_job), naming what to use.
CREATE OR REPLACE FUNCTION skiplock._check_reserved_job(kind text, queue text)
RETURNS void LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    use text := skiplock._reserved_job(kind, queue);
BEGIN
    IF use IS NOT NULL THEN
        RAISE EXCEPTION 'skiplock: a % job in queue % is reserved for skiplock''s own functions: use %',
            quote_literal(kind), quote_literal(queue), use USING ERRCODE = '22023';
    END IF;
END;
$$;

-- Unique keys are namespaced by kind and queue (migrations/history/0013_enqueue_namespaces.sql): a
-- job of another kind or queue holding the same key no longer conflicts with a workflow's
-- job, so the squatter eviction and the holder check of earlier versions (each a scan of the
-- key outside the new index) have nothing left to do.
DROP FUNCTION IF EXISTS skiplock._evict_key_squatter(text, text, text);
DROP FUNCTION IF EXISTS skiplock._check_key_holder(text, text, text);

-- Earlier releases read whether an attempt was taken away from the text of `errors`; the
-- column jobs.taken_attempt says it now (migrations/core/0004_taken_attempt.sql).
DROP FUNCTION IF EXISTS skiplock._attempt_taken_away(jsonb);

-- How much of the args a replace overwrote its `errors` entry keeps (characters of their
-- JSON text): enough to see what was there, bounded so repeated replaces of large args
-- cannot grow a row without limit faster than the args themselves.
CREATE OR REPLACE FUNCTION skiplock._replaced_args_max() RETURNS integer
LANGUAGE sql IMMUTABLE AS $$ SELECT 2000 $$;

-- How many replace entries a job's `errors` keeps: the latest ones. Each entry holds up to
-- skiplock._replaced_args_max characters of args, so without a bound every replace that
-- changes the args would grow the row (and rewrite all of it) for as long as the key is
-- replaced; each entry numbers its replace (`replace`), so the ones no longer kept are
-- counted, not lost without a trace.
CREATE OR REPLACE FUNCTION skiplock._replaced_kept() RETURNS integer
LANGUAGE sql IMMUTABLE AS $$ SELECT 10 $$;

-- The form of API 8 (one entry, no number) is replaced by skiplock._with_replaced_entry.
DROP FUNCTION IF EXISTS skiplock._replaced_entry(integer, jsonb);

-- A job's `errors` after a replace that changed its args (skiplock._enqueue_outcome): the
-- entries it had, less the oldest replace entries beyond skiplock._replaced_kept - 1, and the
-- new entry {attempt, at, error: 'replaced by <login>', replace: <its number: 1 for the job's
-- first replace>, replaced_args: <the old args' JSON text, at most
-- skiplock._replaced_args_max characters>, truncated: whether it was cut}. Entries of failed
-- attempts are all kept. Runs only for a replace that changes the args.
CREATE OR REPLACE FUNCTION skiplock._with_replaced_entry(errors jsonb, attempt integer, old_args jsonb)
RETURNS jsonb LANGUAGE sql STABLE AS $$
    WITH e AS (
        SELECT t.e, t.o,
               count(*) FILTER (WHERE t.e ? 'replaced_args') OVER (ORDER BY t.o DESC) AS newer_replaces
        FROM jsonb_array_elements(errors) WITH ORDINALITY AS t(e, o)
    )
    SELECT coalesce((SELECT jsonb_agg(e.e ORDER BY e.o) FROM e
                     WHERE NOT (e.e ? 'replaced_args' AND e.newer_replaces >= skiplock._replaced_kept())),
                    '[]'::jsonb)
           || jsonb_build_array(jsonb_build_object(
                  'attempt', attempt, 'at', now(),
                  'error', format('replaced by %s: the args before are in replaced_args', session_user),
                  -- Entries of API 8 have no number: each counts as one replace.
                  'replace', 1 + (SELECT greatest(coalesce(max((e.e ->> 'replace')::bigint), 0), count(*))
                                  FROM e WHERE e.e ? 'replaced_args'),
                  'replaced_args', left(old_args::text, skiplock._replaced_args_max()),
                  'truncated', length(old_args::text) > skiplock._replaced_args_max()))
$$;

-- A job's tags as stored: each 1 to 100 characters, at most 32, sorted, without repeats (so
-- `tags @> '{x}'` and a filter by tag read one form); NULL means none. Refuses anything else
-- naming the problem (SQLSTATE 22023).
CREATE OR REPLACE FUNCTION skiplock._tags(tags text[]) RETURNS text[]
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    bad text;
BEGIN
    IF tags IS NULL THEN
        RETURN '{}';
    END IF;
    IF cardinality(tags) > 32 THEN
        RAISE EXCEPTION 'skiplock: a job has at most 32 tags, got %', cardinality(tags) USING ERRCODE = '22023';
    END IF;
    SELECT coalesce(quote_literal(t), 'NULL') INTO bad FROM unnest(tags) t
    WHERE t IS NULL OR t = '' OR length(t) > 100 LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'skiplock: tag % must be 1 to 100 characters', left(bad, 120) USING ERRCODE = '22023';
    END IF;
    RETURN ARRAY(SELECT DISTINCT t FROM unnest(tags) t ORDER BY t);
END;
$$;

-- The unique_key `unique_by` derived from a job's args before key scopes (API 8; a job
-- enqueued then keeps it, and skiplock._enqueue_outcome still finds it): 'args' hashes the
-- whole args, 'args:a,b' only their top-level fields a and b (a field missing counts as null).
-- Two args are the same when their jsonb text is: keys are sorted by jsonb, so their order in
-- the caller's JSON does not matter. The key is 'args:' and an md5.
CREATE OR REPLACE FUNCTION skiplock._unique_args_key(unique_by text, args jsonb) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    fields text[];
BEGIN
    IF unique_by = 'args' THEN
        RETURN 'args:' || md5(args::text);
    END IF;
    IF starts_with(unique_by, 'args:') THEN
        fields := ARRAY(SELECT DISTINCT btrim(f) FROM unnest(string_to_array(substr(unique_by, 6), ',')) f
                        ORDER BY 1);
        IF cardinality(fields) > 0 AND NOT '' = ANY (fields) THEN
            RETURN 'args:' || md5(jsonb_build_array(
                to_jsonb(fields),
                (SELECT jsonb_agg(args -> f ORDER BY f) FROM unnest(fields) f))::text);
        END IF;
    END IF;
    RAISE EXCEPTION 'skiplock: unique_by must be ''args'' or ''args:<field>,<field>...'', got %',
        quote_nullable(left(unique_by, 200)) USING ERRCODE = '22023';
END;
$$;

-- The enqueuing login's key scope (migrations/core/0012_key_scopes.sql): the one the owner
-- gave it (skiplock.set_key_scope), else its name. `session_user`, not the functions' owner:
-- the SECURITY DEFINER enqueue functions run as their owner, but the login is the caller's.
CREATE OR REPLACE FUNCTION skiplock._key_scope() RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT coalesce((SELECT s.scope FROM skiplock.key_scopes s WHERE s.login = session_user),
                    session_user::text)
$$;

-- The unique_key `unique_by` derives from a job's args for an enqueue of key scope `scope`
-- (docs/sql-reference.md, "Uniqueness"): as skiplock._unique_args_key(unique_by, args) does,
-- with the scope in the hashed text, so two scopes never derive the same key and another
-- enqueuer cannot find yours from the args it guesses (the 'args:' prefix is reserved to
-- unique_by: sql/api/80_reserved.sql).
CREATE OR REPLACE FUNCTION skiplock._unique_args_key(unique_by text, args jsonb, scope text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT 'args:' || md5(jsonb_build_array(scope, skiplock._unique_args_key(unique_by, args))::text)
$$;

-- Gives `login` the key scope `scope` (NULL: its own name again): the logins of one service
-- (its processes, the worker role that enqueues its periodic jobs, an operator's login for
-- `skiplock enqueue`) share the keys `unique_by` derives and the `unique_for` windows only when
-- they share a scope. The owner's alone (no role is granted it): a scope is what separates
-- tenants, so no enqueuer may choose another's. Takes effect at the login's next enqueue.
CREATE OR REPLACE FUNCTION skiplock.set_key_scope(login text, scope text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF set_key_scope.login IS NULL OR NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles r
                                                 WHERE r.rolname = set_key_scope.login) THEN
        RAISE EXCEPTION 'skiplock: set_key_scope: no role named %', quote_nullable(set_key_scope.login)
            USING ERRCODE = '22023';
    END IF;
    IF set_key_scope.scope = '' OR length(set_key_scope.scope) > 200 THEN
        RAISE EXCEPTION 'skiplock: a key scope must be 1 to 200 characters (NULL: the login''s own name)'
            USING ERRCODE = '22023';
    END IF;
    IF set_key_scope.scope IS NULL THEN
        DELETE FROM skiplock.key_scopes s WHERE s.login = set_key_scope.login;
    ELSE
        INSERT INTO skiplock.key_scopes AS s (login, scope) VALUES (set_key_scope.login, set_key_scope.scope)
        ON CONFLICT ON CONSTRAINT key_scopes_pkey DO UPDATE SET scope = EXCLUDED.scope;
    END IF;
END;
$$;

-- Where the `unique_for` window holding now() starts: windows of `w` laid end to end from
-- the Unix epoch, so every caller (and every process) puts a moment in the same window and a
-- day-long window runs from 00:00 UTC.
CREATE OR REPLACE FUNCTION skiplock._window_start(w interval) RETURNS timestamptz
LANGUAGE sql STABLE AS $$
    SELECT to_timestamp(floor(extract(epoch FROM now()) / extract(epoch FROM w)) * extract(epoch FROM w))
$$;

-- Enqueue one job, any key allowed: the body of skiplock.enqueue and skiplock.enqueue_result,
-- and (through skiplock._enqueue) what the workflows' own functions call for their reserved
-- keys. Not executable by skiplock_enqueuer. Returns the job's id and what happened (`outcome`:
-- inserted, deduplicated or replaced). With a
-- unique_key already held by an available job, 'keep' returns that job's id untouched and
-- 'replace' updates that job with what the caller gave (the debounce primitive): args,
-- scheduled_at, priority, max_attempts, limit_key, tags and meta, and the attempt count starts
-- again at 0 (a job waiting for a retry gets the new max_attempts in full; earlier errors stay
-- in `errors`).
-- Kept: id, kind, queue, unique_key, created_at, errors. One exception keeps the ack fence
-- sound: if an attempt was ever taken away from a worker (jobs.taken_attempt is set), that
-- worker's late ack carries an attempt number no later claim may reuse, so `attempt` is kept
-- and max_attempts becomes attempt + the given max_attempts (the same full budget).
-- Safe under concurrent callers: no unique violation escapes.
-- limit_key (0008): the key the queue's per-key limits count the job under (NULL: none).
-- tags, meta (API 8): see skiplock._tags and migrations/core/0006_job_model.sql.
-- unique_by (API 8): the unique_key is derived from the args and the caller's key scope
-- (skiplock._unique_args_key, API 9); it and unique_key exclude each other.
-- unique_for (API 8): at most one job of the kind, queue and key (unique_key, unique_by's, or
-- none: the kind and queue alone) is created per window of that length
-- (skiplock._window_start) and key scope (API 9), whatever became of it since, unless it was
-- cancelled (API 9: the window is free again): a second enqueue in the window returns
-- the window's job (`deduplicated`), or with 'replace' updates it while it is still available.
-- The window's row (skiplock.unique_windows) is taken before the job is written, and its
-- primary key decides a race within a scope: the second caller waits for the first's commit,
-- then finds it; a caller of another scope has a window of its own and waits for no one.
-- The forms of earlier versions are dropped first: with them left in place, a call without the
-- newer arguments would be ambiguous.
DROP FUNCTION IF EXISTS skiplock._enqueue(text, jsonb, text, timestamptz, smallint, integer, text, text);
DROP FUNCTION IF EXISTS skiplock._enqueue_outcome(text, jsonb, text, timestamptz, smallint, integer, text, text, text);
-- depends_on, on_dependency_failure (API 8): a job inserted with dependencies is `waiting`
-- until they have finished (skiplock._add_dependencies, sql/api/12_flows.sql); a job
-- deduplicated or replaced keeps the dependencies it had. The earlier form is dropped so that
-- its calls resolve to this one.
DROP FUNCTION IF EXISTS skiplock._enqueue_outcome(text, jsonb, text, timestamptz, smallint, integer, text, text,
                                                  text, text[], jsonb, text, interval);
CREATE OR REPLACE FUNCTION skiplock._enqueue_outcome(
    kind text,
    args jsonb,
    queue text,
    run_at timestamptz,
    priority smallint,
    max_attempts integer,
    unique_key text,
    on_conflict text,
    limit_key text DEFAULT NULL,
    tags text[] DEFAULT NULL,
    meta jsonb DEFAULT NULL,
    unique_by text DEFAULT NULL,
    unique_for interval DEFAULT NULL,
    depends_on bigint[] DEFAULT NULL,
    on_dependency_failure text DEFAULT NULL,
    OUT job_id bigint,
    OUT outcome skiplock.enqueue_outcome
)
LANGUAGE plpgsql
AS $$
#variable_conflict use_column
DECLARE
    new_id bigint;
    inserted boolean;
    the_key text := _enqueue_outcome.unique_key;
    the_tags text[] := '{}';
    the_meta jsonb := coalesce(_enqueue_outcome.meta, '{}');
    w_start timestamptz;
    w_taken boolean := false;
    -- The key scope of the call (skiplock._key_scope), and the window's scope and key.
    the_scope text;
    legacy_key text;
    w_scope text;
    w_key text;
    -- A constant for a job without dependencies: its insert is the one it always was.
    the_state skiplock.job_state := CASE WHEN cardinality(_enqueue_outcome.depends_on) > 0
                                         THEN 'waiting' ELSE 'available' END;
BEGIN
    -- Every rule at once, as one plpgsql expression (no query): the checks below are a query
    -- each, and together took about a third of a single enqueue's time, so they run
    -- only when something is wrong, to name it. The conjunction is exactly their rules.
    IF NOT coalesce(
           _enqueue_outcome.kind <> '' AND length(_enqueue_outcome.kind) <= 200
           AND _enqueue_outcome.queue <> '' AND length(_enqueue_outcome.queue) <= 200
           AND jsonb_typeof(_enqueue_outcome.args) = 'object' AND octet_length(_enqueue_outcome.args::text) <= 524288
           AND skiplock._unreadable_args(_enqueue_outcome.args) IS NULL
           AND _enqueue_outcome.max_attempts >= 1 AND _enqueue_outcome.priority IS NOT NULL
           AND (_enqueue_outcome.run_at IS NULL OR skiplock._time_ok(_enqueue_outcome.run_at))
           AND _enqueue_outcome.on_conflict IN ('keep', 'replace')
           AND (_enqueue_outcome.unique_key IS NULL OR octet_length(_enqueue_outcome.unique_key) <= 1000)
           AND (_enqueue_outcome.limit_key IS NULL OR (_enqueue_outcome.limit_key <> '' AND octet_length(_enqueue_outcome.limit_key) <= 1000))
           AND (_enqueue_outcome.meta IS NULL OR (jsonb_typeof(_enqueue_outcome.meta) = 'object'
                                                  AND octet_length(_enqueue_outcome.meta::text) <= 65536
                                                  AND skiplock._unreadable_args(_enqueue_outcome.meta) IS NULL)),
           false) THEN
        PERFORM skiplock._check_job(_enqueue_outcome.kind, _enqueue_outcome.args, _enqueue_outcome.queue, _enqueue_outcome.priority, _enqueue_outcome.max_attempts);
        PERFORM skiplock._check_time('run_at', _enqueue_outcome.run_at);
        IF _enqueue_outcome.on_conflict IS NULL OR _enqueue_outcome.on_conflict NOT IN ('keep', 'replace') THEN
            RAISE EXCEPTION 'skiplock: on_conflict must be ''keep'' or ''replace'', got %', quote_nullable(_enqueue_outcome.on_conflict)
                USING ERRCODE = '22023';
        END IF;
        -- A long key would fail later with an obscure "index row size exceeds btree maximum".
        IF octet_length(_enqueue_outcome.unique_key) > 1000 THEN
            RAISE EXCEPTION 'skiplock: unique_key is % bytes long (at most 1000)', octet_length(_enqueue_outcome.unique_key)
                USING ERRCODE = '22023';
        END IF;
        PERFORM skiplock._check_limit_key(_enqueue_outcome.limit_key);
        PERFORM skiplock._check_meta(_enqueue_outcome.meta);
    END IF;
    IF _enqueue_outcome.tags IS NOT NULL THEN
        the_tags := skiplock._tags(_enqueue_outcome.tags);
    END IF;
    IF _enqueue_outcome.limit_key IS NOT NULL THEN
        _enqueue_outcome.run_at := skiplock._due_after_hold(_enqueue_outcome.queue,
            _enqueue_outcome.limit_key, _enqueue_outcome.run_at);
    END IF;

    IF _enqueue_outcome.unique_by IS NOT NULL OR _enqueue_outcome.unique_for IS NOT NULL THEN
        -- Keys derived from args and windows are the caller's key scope's
        -- (migrations/core/0012_key_scopes.sql): another enqueuer neither finds nor takes them.
        the_scope := skiplock._key_scope();
        IF _enqueue_outcome.unique_by IS NOT NULL THEN
            IF the_key IS NOT NULL THEN
                RAISE EXCEPTION 'skiplock: give unique_key or unique_by, not both' USING ERRCODE = '22023';
            END IF;
            the_key := skiplock._unique_args_key(_enqueue_outcome.unique_by, _enqueue_outcome.args, the_scope);
            -- A job enqueued with these args before key scopes keeps the key it got then
            -- (shared, as keys were): while it waits, it is the one found.
            legacy_key := skiplock._unique_args_key(_enqueue_outcome.unique_by, _enqueue_outcome.args);
            IF EXISTS (SELECT 1 FROM skiplock.jobs j
                       WHERE j.kind = _enqueue_outcome.kind AND j.queue = _enqueue_outcome.queue
                         AND j.unique_key = legacy_key AND j.state IN ('available', 'waiting')) THEN
                the_key := legacy_key;
            END IF;
        END IF;
        IF _enqueue_outcome.unique_for IS NOT NULL THEN
            -- Bounded so that the window's end stays a time a row may hold (skiplock._time_ok).
            IF NOT extract(epoch FROM _enqueue_outcome.unique_for) BETWEEN 0.000001 AND 31557600000 THEN
                RAISE EXCEPTION 'skiplock: unique_for must be a positive interval of at most 1000 years, got %',
                    _enqueue_outcome.unique_for USING ERRCODE = '22023';
            END IF;
            IF the_key IS NULL AND _enqueue_outcome.on_conflict = 'replace' THEN
                RAISE EXCEPTION 'skiplock: on_conflict ''replace'' with unique_for needs unique_key or unique_by (which job would it replace?)'
                    USING ERRCODE = '22023';
            END IF;
            w_start := skiplock._window_start(_enqueue_outcome.unique_for);
            -- A window taken before key scopes (scope '', its key as it was then) holds for
            -- every caller until it ends, as it did; otherwise the caller's scope's window.
            w_scope := the_scope;
            w_key := coalesce(the_key, '');
            IF EXISTS (SELECT 1 FROM skiplock.unique_windows w
                       WHERE w.kind = _enqueue_outcome.kind AND w.queue = _enqueue_outcome.queue
                         AND w.scope = '' AND w.key = coalesce(legacy_key, _enqueue_outcome.unique_key, '')
                         AND w.window_start = w_start) THEN
                w_scope := '';
                w_key := coalesce(legacy_key, _enqueue_outcome.unique_key, '');
            END IF;
            -- The window's row, or the job it names; the row is share-locked when found, so
            -- retention cannot delete it between the two statements (if it did before, the
            -- insert is tried again).
            LOOP
                INSERT INTO skiplock.unique_windows (kind, queue, scope, key, window_start, window_end, job_id)
                VALUES (_enqueue_outcome.kind, _enqueue_outcome.queue, w_scope, w_key, w_start,
                        w_start + make_interval(secs => extract(epoch FROM _enqueue_outcome.unique_for)), 0)
                ON CONFLICT DO NOTHING;
                w_taken := FOUND;
                EXIT WHEN w_taken;
                SELECT w.job_id INTO new_id FROM skiplock.unique_windows w
                WHERE w.kind = _enqueue_outcome.kind AND w.queue = _enqueue_outcome.queue
                  AND w.scope = w_scope AND w.key = w_key AND w.window_start = w_start;
                CONTINUE WHEN NOT FOUND;
                IF EXISTS (SELECT 1 FROM skiplock.jobs j WHERE j.id = new_id AND j.state = 'cancelled') THEN
                    -- The window's job was cancelled (an operator undoing a squatter, or the
                    -- enqueuer's own second thought): the window is free again. Taken under
                    -- the row's lock, so one caller of the scope writes the new job, and the
                    -- others find it.
                    SELECT w.job_id INTO new_id FROM skiplock.unique_windows w
                    WHERE w.kind = _enqueue_outcome.kind AND w.queue = _enqueue_outcome.queue
                      AND w.scope = w_scope AND w.key = w_key AND w.window_start = w_start
                    FOR UPDATE;
                    CONTINUE WHEN NOT FOUND;
                    w_taken := EXISTS (SELECT 1 FROM skiplock.jobs j WHERE j.id = new_id AND j.state = 'cancelled');
                    EXIT;
                END IF;
                SELECT w.job_id INTO new_id FROM skiplock.unique_windows w
                WHERE w.kind = _enqueue_outcome.kind AND w.queue = _enqueue_outcome.queue
                  AND w.scope = w_scope AND w.key = w_key AND w.window_start = w_start
                FOR SHARE;
                EXIT WHEN FOUND;
            END LOOP;
            IF NOT w_taken THEN
                -- 'replace' updates the window's job below while it waits (it holds the key),
                -- locked first so no claim takes it meanwhile (the replace would then insert a
                -- second job in the window); once it has run, the window is spent.
                IF _enqueue_outcome.on_conflict = 'replace' THEN
                    PERFORM 1 FROM skiplock.jobs j WHERE j.id = new_id AND j.state IN ('available', 'waiting') FOR NO KEY UPDATE;
                END IF;
                IF _enqueue_outcome.on_conflict = 'keep' OR NOT FOUND THEN
                    job_id := new_id;
                    outcome := 'deduplicated';
                    RETURN;
                END IF;
            END IF;
        END IF;
    END IF;

    <<write>>
    BEGIN
        IF the_key IS NULL THEN
            INSERT INTO skiplock.jobs (kind, args, queue, scheduled_at, priority, max_attempts, limit_key, tags, meta, state)
            VALUES (_enqueue_outcome.kind, _enqueue_outcome.args, _enqueue_outcome.queue, coalesce(_enqueue_outcome.run_at, now()),
                    _enqueue_outcome.priority, _enqueue_outcome.max_attempts, _enqueue_outcome.limit_key, the_tags, the_meta,
                    the_state)
            RETURNING id INTO new_id;
            job_id := new_id;
            outcome := 'inserted';
            EXIT write;
        END IF;

        IF _enqueue_outcome.on_conflict = 'replace' THEN
            -- The key is the job's within its kind and queue (the unique index, migrations/
            -- 0013_enqueue_namespaces.sql): a job of another kind or queue with the same key is
            -- another job. A replace that changes the args records the args it overwrote, and who
            -- replaced them (the login: session_user, not the functions' owner), in the job's
            -- errors, at most skiplock._replaced_args_max characters of them, and the latest
            -- skiplock._replaced_kept replaces only (numbered): the original args are never lost
            -- without trace, and the row does not grow without bound. Identical args (a
            -- debounce that only moves the time) record nothing, so a debounced row does not grow.
            INSERT INTO skiplock.jobs AS j (kind, args, queue, scheduled_at, priority, max_attempts, unique_key, limit_key, tags, meta, state)
            VALUES (_enqueue_outcome.kind, _enqueue_outcome.args, _enqueue_outcome.queue, coalesce(_enqueue_outcome.run_at, now()),
                    _enqueue_outcome.priority, _enqueue_outcome.max_attempts, the_key, _enqueue_outcome.limit_key,
                    the_tags, the_meta, the_state)
            ON CONFLICT (kind, queue, unique_key) WHERE state = 'available' AND unique_key IS NOT NULL
            DO UPDATE SET args = EXCLUDED.args, scheduled_at = EXCLUDED.scheduled_at,
                priority = EXCLUDED.priority, limit_key = EXCLUDED.limit_key,
                tags = EXCLUDED.tags, meta = EXCLUDED.meta,
                attempt = CASE WHEN j.taken_attempt IS NOT NULL THEN j.attempt ELSE 0 END,
                max_attempts = CASE WHEN j.taken_attempt IS NOT NULL
                                    THEN least(j.attempt::bigint + EXCLUDED.max_attempts, 2147483647)::integer
                                    ELSE EXCLUDED.max_attempts END,
                errors = CASE WHEN j.args = EXCLUDED.args THEN j.errors
                              ELSE skiplock._with_replaced_entry(j.errors, j.attempt, j.args) END
            -- xmax is 0 on a row this statement inserted, this transaction's id on one it updated.
            RETURNING id, (xmax = 0) INTO new_id, inserted;
            -- The insert trigger sees only inserted rows: a replace that moved the job to another
            -- priority or time registers that lane itself (skiplock._lanes_need), and a waiting
            -- job moved to now needs its own wake-up (a second NOTIFY for an insert is folded
            -- into one by Postgres).
            IF NOT inserted AND the_state = 'available' THEN
                PERFORM skiplock._lanes_need(ARRAY[_enqueue_outcome.queue], ARRAY[_enqueue_outcome.priority],
                                             ARRAY[_enqueue_outcome.limit_key],
                                             ARRAY[coalesce(_enqueue_outcome.run_at, now())]);
            END IF;
            IF coalesce(_enqueue_outcome.run_at, now()) <= now() THEN
                PERFORM pg_notify(skiplock._wake_channel(), _enqueue_outcome.queue);
            END IF;
            job_id := new_id;
            outcome := CASE WHEN inserted THEN 'inserted' ELSE 'replaced' END;
            EXIT write;
        END IF;

        -- 'keep': insert unless an available job of this kind and queue holds the key; if one
        -- does, return it. The job may be claimed between the two statements, so loop until one
        -- of them answers.
        LOOP
            INSERT INTO skiplock.jobs (kind, args, queue, scheduled_at, priority, max_attempts, unique_key, limit_key, tags, meta, state)
            VALUES (_enqueue_outcome.kind, _enqueue_outcome.args, _enqueue_outcome.queue, coalesce(_enqueue_outcome.run_at, now()),
                    _enqueue_outcome.priority, _enqueue_outcome.max_attempts, the_key, _enqueue_outcome.limit_key,
                    the_tags, the_meta, the_state)
            ON CONFLICT (kind, queue, unique_key) WHERE state = 'available' AND unique_key IS NOT NULL
            DO NOTHING
            RETURNING id INTO new_id;
            IF new_id IS NOT NULL THEN
                job_id := new_id;
                outcome := 'inserted';
                EXIT write;
            END IF;
            SELECT j.id INTO new_id FROM skiplock.jobs j
            WHERE j.kind = _enqueue_outcome.kind AND j.queue = _enqueue_outcome.queue
              AND j.unique_key = the_key AND j.state IN ('available', 'waiting');
            IF new_id IS NOT NULL THEN
                job_id := new_id;
                outcome := 'deduplicated';
                EXIT write;
            END IF;
        END LOOP;
    END;

    IF the_state = 'waiting' AND outcome = 'inserted' THEN
        PERFORM skiplock._add_dependencies(ARRAY[_enqueue_outcome.job_id], _enqueue_outcome.depends_on,
                                           _enqueue_outcome.on_dependency_failure);
    END IF;

    IF w_taken THEN
        UPDATE skiplock.unique_windows w SET job_id = _enqueue_outcome.job_id
        WHERE w.kind = _enqueue_outcome.kind AND w.queue = _enqueue_outcome.queue
          AND w.scope = w_scope AND w.key = w_key AND w.window_start = w_start;
    END IF;
END;
$$;

-- skiplock._enqueue_outcome's id alone: what the workflows' own functions call for their
-- reserved keys (the 9-argument form; earlier versions' body). Not executable by
-- skiplock_enqueuer.
CREATE OR REPLACE FUNCTION skiplock._enqueue(
    kind text,
    args jsonb,
    queue text,
    run_at timestamptz,
    priority smallint,
    max_attempts integer,
    unique_key text,
    on_conflict text,
    limit_key text DEFAULT NULL
) RETURNS bigint
LANGUAGE sql AS $$
    SELECT e.job_id FROM skiplock._enqueue_outcome(kind, args, queue, run_at, priority, max_attempts,
                                                   unique_key, on_conflict, limit_key) e
$$;


-- Enqueue one job (the public entry point; see skiplock._enqueue_outcome for keys and
-- conflicts): returns its id. A unique_key in a reserved namespace (skiplock._reserved_key_prefix)
-- is refused, and so is a job of a reserved queue or kind (skiplock._reserved_job).
-- limit_key, tags, meta, unique_by, unique_for, depends_on, on_dependency_failure: see
-- skiplock._enqueue_outcome (the forms of earlier versions are dropped so that old call forms
-- resolve to this one).
DROP FUNCTION IF EXISTS skiplock.enqueue(text, jsonb, text, timestamptz, smallint, integer, text, text);
DROP FUNCTION IF EXISTS skiplock.enqueue(text, jsonb, text, timestamptz, smallint, integer, text, text, text);
DROP FUNCTION IF EXISTS skiplock.enqueue(text, jsonb, text, timestamptz, smallint, integer, text, text, text,
                                         text[], jsonb, text, interval);
CREATE OR REPLACE FUNCTION skiplock.enqueue(
    kind text,
    args jsonb DEFAULT '{}',
    queue text DEFAULT 'default',
    run_at timestamptz DEFAULT now(),
    priority smallint DEFAULT 0,
    max_attempts integer DEFAULT 25,
    unique_key text DEFAULT NULL,
    on_conflict text DEFAULT 'keep',
    limit_key text DEFAULT NULL,
    tags text[] DEFAULT NULL,
    meta jsonb DEFAULT NULL,
    unique_by text DEFAULT NULL,
    unique_for interval DEFAULT NULL,
    depends_on bigint[] DEFAULT NULL,
    on_dependency_failure text DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql
-- Runs with the owner's rights so a role holding only skiplock_enqueuer (sql/api/90_roles.sql)
-- can insert without any table privilege; a fixed search_path, and every name qualified.
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r record;
BEGIN
    PERFORM skiplock._check_enqueue_names(enqueue.kind, enqueue.queue, enqueue.unique_key);
    SELECT * INTO r FROM skiplock._enqueue_outcome(enqueue.kind, enqueue.args, enqueue.queue,
        enqueue.run_at, enqueue.priority, enqueue.max_attempts, enqueue.unique_key,
        enqueue.on_conflict, enqueue.limit_key, enqueue.tags, enqueue.meta, enqueue.unique_by,
        enqueue.unique_for, enqueue.depends_on, enqueue.on_dependency_failure);
    RETURN r.job_id;
END;
$$;

-- skiplock.enqueue that also says what happened: one row (id, outcome), outcome `inserted`
-- (a new job), `deduplicated` (an available job of the kind and queue held the unique_key and
-- was left as it was: on_conflict 'keep') or `replaced` (that job was updated: 'replace').
DROP FUNCTION IF EXISTS skiplock.enqueue_result(text, jsonb, text, timestamptz, smallint, integer, text, text, text);
DROP FUNCTION IF EXISTS skiplock.enqueue_result(text, jsonb, text, timestamptz, smallint, integer, text, text, text,
                                                text[], jsonb, text, interval);
CREATE OR REPLACE FUNCTION skiplock.enqueue_result(
    kind text,
    args jsonb DEFAULT '{}',
    queue text DEFAULT 'default',
    run_at timestamptz DEFAULT now(),
    priority smallint DEFAULT 0,
    max_attempts integer DEFAULT 25,
    unique_key text DEFAULT NULL,
    on_conflict text DEFAULT 'keep',
    limit_key text DEFAULT NULL,
    tags text[] DEFAULT NULL,
    meta jsonb DEFAULT NULL,
    unique_by text DEFAULT NULL,
    unique_for interval DEFAULT NULL,
    depends_on bigint[] DEFAULT NULL,
    on_dependency_failure text DEFAULT NULL
) RETURNS TABLE (id bigint, outcome skiplock.enqueue_outcome)
LANGUAGE plpgsql
-- Owner's rights, fixed search_path: see skiplock.enqueue.
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM skiplock._check_enqueue_names(enqueue_result.kind, enqueue_result.queue,
                                          enqueue_result.unique_key);
    RETURN QUERY SELECT e.job_id, e.outcome FROM skiplock._enqueue_outcome(
        enqueue_result.kind, enqueue_result.args, enqueue_result.queue, enqueue_result.run_at,
        enqueue_result.priority, enqueue_result.max_attempts, enqueue_result.unique_key,
        enqueue_result.on_conflict, enqueue_result.limit_key, enqueue_result.tags,
        enqueue_result.meta, enqueue_result.unique_by, enqueue_result.unique_for,
        enqueue_result.depends_on, enqueue_result.on_dependency_failure) e;
END;
$$;

-- Refuses a generic enqueue of a reserved unique-key prefix, queue or kind, naming what to use
-- instead (skiplock.reserved_names). Each check runs its query only for a name that is
-- reserved: an ordinary enqueue pays one inlined CASE per rule.
CREATE OR REPLACE FUNCTION skiplock._check_enqueue_names(kind text, queue text, unique_key text)
RETURNS void LANGUAGE plpgsql STABLE AS $$
DECLARE
    reserved text := skiplock._reserved_key_prefix(_check_enqueue_names.unique_key);
BEGIN
    IF reserved IS NOT NULL THEN
        RAISE EXCEPTION 'skiplock: unique_key prefix % is reserved for skiplock''s own functions (use %)',
            quote_literal(reserved),
            (SELECT r.use_instead FROM skiplock.reserved_names r
             WHERE r.what = 'key_prefix' AND r.name = reserved) USING ERRCODE = '22023';
    END IF;
    IF skiplock._reserved_job(_check_enqueue_names.kind, _check_enqueue_names.queue) IS NOT NULL THEN
        PERFORM skiplock._check_reserved_job(_check_enqueue_names.kind, _check_enqueue_names.queue);
    END IF;
END;
$$;

-- A limit from skiplock.settings (migrations/history/0006_hardening.sql and
-- migrations/core/0010_flow_bounds.sql seed them; only the owner may change them). A deleted
-- row falls back to the seeded default.
CREATE OR REPLACE FUNCTION skiplock._limit(name text) RETURNS bigint
LANGUAGE sql STABLE AS $$
    SELECT coalesce((SELECT s.value FROM skiplock.settings s WHERE s.name = _limit.name),
                    CASE _limit.name WHEN 'enqueue_many.max_rows' THEN 100000
                                     WHEN 'enqueue_many.max_bytes' THEN 33554432
                                     WHEN 'depends_on.max_edges' THEN 100000
                                     WHEN 'flow_members.max_jobs' THEN 10000 END)
$$;

-- Bulk insert: one statement, one NOTIFY per queue. Returns the ids in the order of args.
-- At most `enqueue_many.max_rows` jobs (100,000) and `enqueue_many.max_bytes` of args
-- (32 MiB as JSON text, all rows together) per call (skiplock.settings): one call cannot
-- write an unbounded amount. The checks read each row's size once, in the same pass as the
-- per-row check that was already there, which also refuses args a worker could not read
-- (skiplock._unreadable_args).
-- limit_key (0008), tags and meta (API 8): every job of the call gets them (NULL: none).
-- unique_by, unique_for, on_conflict (API 8): each job is enqueued as skiplock.enqueue does
-- with them, one after the other in the order of args, so a duplicate within the call is found
-- like one from another call, and its place in the returned array holds the id of the job that
-- absorbed it. Without them the call is one INSERT. depends_on, on_dependency_failure (API 8):
-- every job of the call waits for the same jobs (a fan-out; docs/flows.md). The forms of
-- earlier versions are dropped so that old call forms resolve to this one.
DROP FUNCTION IF EXISTS skiplock.enqueue_many(text, jsonb[], text, timestamptz, smallint);
DROP FUNCTION IF EXISTS skiplock.enqueue_many(text, jsonb[], text, timestamptz, smallint, text);
DROP FUNCTION IF EXISTS skiplock.enqueue_many(text, jsonb[], text, timestamptz, smallint, text, text[], jsonb,
                                              text, interval, text);
CREATE OR REPLACE FUNCTION skiplock.enqueue_many(
    kind text,
    args jsonb[],
    queue text DEFAULT 'default',
    run_at timestamptz DEFAULT now(),
    priority smallint DEFAULT 0,
    limit_key text DEFAULT NULL,
    tags text[] DEFAULT NULL,
    meta jsonb DEFAULT NULL,
    unique_by text DEFAULT NULL,
    unique_for interval DEFAULT NULL,
    on_conflict text DEFAULT 'keep',
    depends_on bigint[] DEFAULT NULL,
    on_dependency_failure text DEFAULT NULL
) RETURNS bigint[]
LANGUAGE plpgsql
-- Owner's rights, fixed search_path: see skiplock.enqueue.
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    bad integer;
    unreadable integer;
    total bigint;
    ids bigint[];
    max_rows bigint := skiplock._limit('enqueue_many.max_rows');
    max_bytes bigint := skiplock._limit('enqueue_many.max_bytes');
    the_tags text[];
    one jsonb;
    pos bigint;
BEGIN
    PERFORM skiplock._check_job(enqueue_many.kind, '{}'::jsonb, enqueue_many.queue, enqueue_many.priority, 1);
    -- As skiplock.enqueue: a reserved queue or kind is refused.
    PERFORM skiplock._check_reserved_job(enqueue_many.kind, enqueue_many.queue);
    PERFORM skiplock._check_time('run_at', enqueue_many.run_at);
    PERFORM skiplock._check_limit_key(enqueue_many.limit_key);
    PERFORM skiplock._check_meta(enqueue_many.meta);
    the_tags := skiplock._tags(enqueue_many.tags);
    IF coalesce(cardinality(enqueue_many.args), 0) > max_rows THEN
        RAISE EXCEPTION 'skiplock: enqueue_many got % jobs (at most % per call, setting enqueue_many.max_rows)',
            cardinality(enqueue_many.args), max_rows USING ERRCODE = '22023';
    END IF;
    SELECT min(t.ord) FILTER (WHERE t.a IS NULL OR jsonb_typeof(t.a) <> 'object' OR t.n > 524288),
           min(t.ord) FILTER (WHERE skiplock._unreadable_args(t.a) IS NOT NULL),
           sum(t.n)
    INTO bad, unreadable, total
    FROM (SELECT u.a, u.ord, octet_length(u.a::text) AS n
          FROM unnest(enqueue_many.args) WITH ORDINALITY AS u(a, ord)) AS t;
    IF bad IS NOT NULL THEN
        RAISE EXCEPTION 'skiplock: args[%] must be a JSON object of at most 524288 bytes', bad USING ERRCODE = '22023';
    END IF;
    IF unreadable IS NOT NULL THEN
        RAISE EXCEPTION 'skiplock: args[%] %', unreadable,
            skiplock._unreadable_args(enqueue_many.args[array_lower(enqueue_many.args, 1) + unreadable - 1]) USING ERRCODE = '22023';
    END IF;
    IF total > max_bytes THEN
        RAISE EXCEPTION 'skiplock: enqueue_many got % bytes of args (at most % per call, setting enqueue_many.max_bytes)',
            total, max_bytes USING ERRCODE = '22023';
    END IF;
    -- Every job of the call waits for every job of depends_on: the call's edges are bounded
    -- here, before the first insert, also where the jobs are enqueued one by one below.
    PERFORM skiplock._check_edges(coalesce(cardinality(enqueue_many.args), 0), enqueue_many.depends_on);
    IF enqueue_many.unique_by IS NOT NULL OR enqueue_many.unique_for IS NOT NULL THEN
        -- In the order of the keys they lock (then of args), so two calls with the same args in
        -- another order wait for each other instead of deadlocking; each id goes to its place.
        ids := array_fill(NULL::bigint, ARRAY[coalesce(cardinality(enqueue_many.args), 0)]);
        FOR one, pos IN
            SELECT t.a, t.ord FROM unnest(enqueue_many.args) WITH ORDINALITY AS t(a, ord)
            ORDER BY CASE WHEN enqueue_many.unique_by IS NOT NULL
                          THEN skiplock._unique_args_key(enqueue_many.unique_by, t.a, skiplock._key_scope()) END,
                     t.ord
        LOOP
            ids[pos] := (SELECT e.job_id FROM skiplock._enqueue_outcome(
                enqueue_many.kind, one, enqueue_many.queue, coalesce(enqueue_many.run_at, now()),
                enqueue_many.priority, 25, NULL, enqueue_many.on_conflict, enqueue_many.limit_key,
                the_tags, enqueue_many.meta, enqueue_many.unique_by, enqueue_many.unique_for,
                enqueue_many.depends_on, enqueue_many.on_dependency_failure) e);
        END LOOP;
        RETURN coalesce(ids, '{}');
    END IF;
    IF enqueue_many.limit_key IS NOT NULL THEN
        enqueue_many.run_at := skiplock._due_after_hold(enqueue_many.queue, enqueue_many.limit_key,
                                                       enqueue_many.run_at);
    END IF;
    WITH ins AS (
        INSERT INTO skiplock.jobs (kind, args, queue, scheduled_at, priority, limit_key, tags, meta, state)
        SELECT enqueue_many.kind, t.a, enqueue_many.queue, coalesce(enqueue_many.run_at, now()), enqueue_many.priority,
               enqueue_many.limit_key, the_tags, coalesce(enqueue_many.meta, '{}'),
               CASE WHEN cardinality(enqueue_many.depends_on) > 0 THEN 'waiting' ELSE 'available' END::skiplock.job_state
        FROM unnest(enqueue_many.args) WITH ORDINALITY AS t(a, ord)
        ORDER BY t.ord
        RETURNING id
    )
    SELECT coalesce(array_agg(ins.id ORDER BY ins.id), '{}') INTO ids FROM ins;
    IF cardinality(enqueue_many.depends_on) > 0 THEN
        PERFORM skiplock._add_dependencies(ids, enqueue_many.depends_on, enqueue_many.on_dependency_failure);
    END IF;
    RETURN ids;
END;
$$;
