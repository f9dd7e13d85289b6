-- skiplock core SQL API: enqueue from any language, cancel, retry, and a stats view.
-- Installed (CREATE OR REPLACE) by `skiplock migrate` after the schema migrations.

-- The channel every wake-up is sent on (migrations/history/0015_wake_channel.sql): a secret of the
-- owner and the worker role, so a login without skiplock's grants that LISTENs learns no
-- queue name (docs/security.md, "Wake-ups"). One inlined read of a one-row table; a deleted
-- row falls back to the old fixed name rather than failing every enqueue.
CREATE OR REPLACE FUNCTION skiplock._wake_channel() RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT coalesce((SELECT w.channel FROM skiplock.wake_channel w), 'skiplock_wake')
$$;

-- The lanes (skiplock.lanes: a queue's priorities) and the fair queues' key lanes
-- (skiplock.key_lanes) that jobs just made available need (migrations/core/0011_sleeping_lanes.sql):
-- per lane of `queues[i]` and `priorities[i]` (and per key `keys[i]` of a fair queue), the
-- earliest of its jobs' `times[i]`. A lane with a row a claim will read by then (not pending,
-- awake or due by then) needs nothing: one probe of its index, no write. Otherwise the caller
-- adds a row of its own (awake, or asleep until that time), which becomes visible with its
-- jobs, and never waits for another transaction. Every statement that makes a job available
-- or moves one earlier calls it, after writing the jobs (the maintenance waits for such
-- writers before it changes a row one of them may rely on: skiplock._lanes_settle).
CREATE OR REPLACE FUNCTION skiplock._lanes_need(queues text[], priorities smallint[], keys text[],
                                                times timestamptz[])
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    one_q text;
    one_p smallint;
    one_k text;
    one_t timestamptz;
BEGIN
    -- One job (every single enqueue): the same, without the sets. The set form's grouping
    -- cost a single enqueue about 80 µs; this one probe costs about 10.
    IF cardinality(queues) = 1 THEN
        one_q := queues[1];
        one_p := priorities[1];
        one_k := keys[1];
        one_t := times[1];
        IF NOT EXISTS (SELECT 1 FROM skiplock.lanes l
                       WHERE l.queue = one_q AND l.priority = one_p AND NOT l.pending
                         AND (l.due_at IS NULL OR l.due_at <= greatest(one_t, now()))) THEN
            INSERT INTO skiplock.lanes (queue, priority, due_at)
            VALUES (one_q, one_p, CASE WHEN one_t <= now() THEN NULL ELSE skiplock._time_clamp(one_t) END);
        END IF;
        IF one_k > '' AND EXISTS (SELECT 1 FROM skiplock.queues c WHERE c.queue = one_q AND c.fair)
           AND NOT EXISTS (SELECT 1 FROM skiplock.key_lanes l
                           WHERE l.queue = one_q AND l.limit_key = one_k AND NOT l.pending
                             AND (l.due_at IS NULL OR l.due_at <= greatest(one_t, now()))) THEN
            INSERT INTO skiplock.key_lanes (queue, limit_key, due_at)
            VALUES (one_q, one_k, CASE WHEN one_t <= now() THEN NULL ELSE skiplock._time_clamp(one_t) END);
        END IF;
        RETURN;
    END IF;
    INSERT INTO skiplock.lanes (queue, priority, due_at)
    SELECT n.q, n.p, CASE WHEN n.t <= now() THEN NULL ELSE skiplock._time_clamp(n.t) END
    FROM (SELECT u.q, u.p, min(u.t) AS t FROM unnest(queues, priorities, times) AS u(q, p, t)
          GROUP BY u.q, u.p) n
    WHERE NOT EXISTS (SELECT 1 FROM skiplock.lanes l
                      WHERE l.queue = n.q AND l.priority = n.p AND NOT l.pending
                        AND (l.due_at IS NULL OR l.due_at <= greatest(n.t, now())));
    IF EXISTS (SELECT 1 FROM unnest(keys) AS k WHERE k > '') THEN
        INSERT INTO skiplock.key_lanes (queue, limit_key, due_at)
        SELECT n.q, n.k, CASE WHEN n.t <= now() THEN NULL ELSE skiplock._time_clamp(n.t) END
        -- No '' key: the API refuses it, and a row written past it must not fail the
        -- statement (an ack batch, a whole insert) for every other row.
        FROM (SELECT u.q, u.k, min(u.t) AS t FROM unnest(queues, keys, times) AS u(q, k, t)
              WHERE u.k > '' GROUP BY u.q, u.k) n
        WHERE EXISTS (SELECT 1 FROM skiplock.queues c WHERE c.queue = n.q AND c.fair)
          AND NOT EXISTS (SELECT 1 FROM skiplock.key_lanes l
                          WHERE l.queue = n.q AND l.limit_key = n.k AND NOT l.pending
                            AND (l.due_at IS NULL OR l.due_at <= greatest(n.t, now())));
    END IF;
END;
$$;

-- Wake idle workers once per statement (not per row) for every queue that got a job due now
-- and that some producer waits on (skiplock.waiting; '' stands for every queue): a commit
-- that notified takes a server-wide lock, so notifying nobody would serialise every
-- enqueue's commit for nothing. A statement trigger covers skiplock.enqueue, enqueue_many and
-- plain INSERTs from psql alike; owner's rights, so an inserting role needs no access to
-- skiplock.waiting.
--
-- The same trigger registers the lanes of the statement's available jobs, as
-- skiplock._lanes_need does (its rule, written out here: calling it cost every insert about
-- 7 µs more): one index probe per lane of the statement, which writes nothing when the lane
-- has a row to rely on, and the fair queues' key lanes only for a statement with keyed jobs.
-- A job inserted `waiting` gets its lane when it is released (sql/api/12_flows.sql).
CREATE OR REPLACE FUNCTION skiplock._notify_inserted() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    adm record;
    waiting bigint;
BEGIN
    -- Admission control (skiplock.set_queue_admission, sql/api/15_control.sql): nothing but
    -- this read of an empty table while no queue has a limit. A limited queue's enqueues take
    -- its transaction-level advisory lock (so two producers cannot both see room for one job)
    -- and count its available jobs, at most max_waiting + the statement's own + 1 index
    -- entries of jobs_claim_idx; past the limit the whole statement is refused (SK429).
    IF EXISTS (SELECT 1 FROM skiplock.queue_admission) THEN
        FOR adm IN
            SELECT a.queue, a.max_waiting, n.added
            FROM (SELECT r.queue, count(*) AS added FROM new_rows r
                  WHERE r.state = 'available' GROUP BY r.queue) n
            JOIN skiplock.queue_admission a ON a.queue = n.queue
            ORDER BY a.queue
        LOOP
            PERFORM pg_advisory_xact_lock(hashtext('skiplock.queue_admission'), hashtext(adm.queue));
            SELECT count(*) INTO waiting
            FROM (SELECT 1 FROM skiplock.jobs j
                  WHERE j.queue = adm.queue AND j.state = 'available'
                  LIMIT adm.max_waiting::bigint + adm.added + 1) w;
            IF waiting > adm.max_waiting THEN
                RAISE EXCEPTION 'skiplock: queue % is full: % jobs wait and its limit is % (max_waiting); % more refused',
                    quote_literal(adm.queue), waiting - adm.added, adm.max_waiting, adm.added
                    USING ERRCODE = 'SK429',
                          HINT = 'wait for the workers to drain it, or raise the limit with skiplock.set_queue_admission';
            END IF;
        END LOOP;
    END IF;
    INSERT INTO skiplock.lanes (queue, priority, due_at)
    SELECT n.queue, n.priority, CASE WHEN n.t <= now() THEN NULL ELSE skiplock._time_clamp(n.t) END
    FROM (SELECT r.queue, r.priority, min(r.scheduled_at) AS t FROM new_rows r
          WHERE r.state = 'available' GROUP BY r.queue, r.priority) n
    WHERE NOT EXISTS (SELECT 1 FROM skiplock.lanes l
                      WHERE l.queue = n.queue AND l.priority = n.priority AND NOT l.pending
                        AND (l.due_at IS NULL OR l.due_at <= greatest(n.t, now())));
    IF EXISTS (SELECT 1 FROM new_rows r WHERE r.state = 'available' AND r.limit_key > '') THEN
        INSERT INTO skiplock.key_lanes (queue, limit_key, due_at)
        SELECT n.queue, n.limit_key, CASE WHEN n.t <= now() THEN NULL ELSE skiplock._time_clamp(n.t) END
        FROM (SELECT r.queue, r.limit_key, min(r.scheduled_at) AS t FROM new_rows r
              WHERE r.state = 'available' AND r.limit_key > '' GROUP BY r.queue, r.limit_key) n
        WHERE EXISTS (SELECT 1 FROM skiplock.queues c WHERE c.queue = n.queue AND c.fair)
          AND NOT EXISTS (SELECT 1 FROM skiplock.key_lanes l
                          WHERE l.queue = n.queue AND l.limit_key = n.limit_key AND NOT l.pending
                            AND (l.due_at IS NULL OR l.due_at <= greatest(n.t, now())));
    END IF;
    PERFORM pg_notify(skiplock._wake_channel(), q.queue)
    FROM (SELECT DISTINCT n.queue FROM new_rows n
          WHERE n.state = 'available' AND n.scheduled_at <= now()) AS q
    WHERE EXISTS (SELECT 1 FROM skiplock.waiting w WHERE w.queue IN (q.queue, ''));
    RETURN NULL;
END;
$$;

DROP TRIGGER IF EXISTS jobs_notify_insert ON skiplock.jobs;
CREATE TRIGGER jobs_notify_insert AFTER INSERT ON skiplock.jobs
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION skiplock._notify_inserted();

-- A keyed job going back to `available` (retry, snooze, rescue, shutdown) while another
-- available job already holds its unique_key is cancelled, superseded by the holder, by the
-- statements that send jobs back (sql/queue/ack_many.sql, rescue.sql, release_unstarted.sql;
-- skiplock.retry refuses it, retry_jobs skips it). Earlier versions did this in a BEFORE UPDATE
-- row trigger, which made Postgres lock and WAL-log every row of every claim, ack and
-- heartbeat before updating it (docs/internals.md): dropped here. A plain UPDATE from psql that would
-- put a second available job on a key fails on the unique index and changes nothing.
DROP TRIGGER IF EXISTS jobs_requeue_unique ON skiplock.jobs;
DROP FUNCTION IF EXISTS skiplock._supersede_requeued();

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

-- How many lanes one claim reads at most (skiplock._claim_lanes): a claim's work stays
-- bounded whatever the number of lanes a queue has, and one that reached this many without
-- filling its batch says where the next claim resumes.
CREATE OR REPLACE FUNCTION skiplock._claim_max_lanes() RETURNS integer
LANGUAGE sql IMMUTABLE AS $$ SELECT 64 $$;

-- The claim's pick (skiplock._claim, and skiplock._claim_limited under a queue concurrency
-- limit): up to `want` due jobs of `kinds` in queue `q`, locked FOR NO KEY UPDATE SKIP LOCKED,
-- in claim order (priority, then scheduled_at, then id); their ctids and ids, the lanes read
-- to their end (`read_out`), and where the next claim resumes when this one stopped at
-- skiplock._claim_max_lanes lanes (`more_after`; NULL: it read every lane it had to). No key
-- update: it does not conflict with the FOR KEY SHARE an enqueue takes on the jobs it depends
-- on (skiplock._add_dependencies), so an enqueuer's open transaction never hides a due job
-- from the claim.
--
-- Lanes. Each priority of a queue is a lane (skiplock.lanes); a lane is read from
-- `lane_since` on (per lane in `lane_priority`; a lane not named is read from its start), not
-- from the head of jobs_claim_idx. The index keeps an entry for every job claimed since the
-- vacuum horizon was pinned (a long transaction, a REPEATABLE READ report, a replication slot
-- left behind): dead to everyone, but vacuum may not remove it, and a scan from the head has
-- to step over each one, so without the bound every claim would cost more with every job run
-- since (docs/internals.md, "Claims when Postgres cannot vacuum"). The worker keeps where each
-- lane's scan may start (src/worker/cursor.rs): a little before the clock of its last claim
-- that found the lane empty. NULL arrays: every lane from its start; the worker sends such a
-- claim first, after a failure, and then as often as its cost allows.
--
-- Only the lanes a job may be due in are read: the awake ones and those whose `due_at` has
-- come (migrations/core/0011_sleeping_lanes.sql), in priority order, after `after_lane` (NULL:
-- from the first), at most skiplock._claim_max_lanes of them: a lane whose jobs are all due
-- later, or that has none left, costs nothing, and however many lanes a queue has (an
-- enqueuer may use all 65,536 priorities) one claim reads at most that many. One probe of each
-- lane index to list them, then one probe of jobs_claim_idx per lane read.
DROP FUNCTION IF EXISTS skiplock._claim_lanes(text, text[], integer, smallint[], timestamptz[]);
CREATE OR REPLACE FUNCTION skiplock._claim_lanes(q text, kinds text[], want integer,
                                                 lane_priority smallint[], lane_since timestamptz[],
                                                 after_lane smallint,
                                                 OUT tids tid[], OUT ids bigint[], OUT read_out smallint[],
                                                 OUT more_after smallint)
-- See skiplock._claim: plans kept from the function's first calls must not scan the table.
SET enable_seqscan = off
LANGUAGE plpgsql AS $$
DECLARE
    lane record;
    lanes smallint[];
    got_tids tid[];
    got_ids bigint[];
    max_lanes constant integer := skiplock._claim_max_lanes();
BEGIN
    tids := '{}';
    ids := '{}';
    read_out := '{}';
    IF coalesce(want, 0) <= 0 OR coalesce(cardinality(kinds), 0) = 0 THEN
        RETURN;
    END IF;
    lanes := ARRAY(
        SELECT DISTINCT u.p FROM (
            (SELECT l.priority AS p FROM skiplock.lanes l
             WHERE l.queue = q AND l.due_at IS NULL AND l.priority > coalesce(after_lane::integer, -32769)
             ORDER BY l.priority LIMIT max_lanes)
            UNION ALL
            (SELECT l.priority FROM skiplock.lanes l
             WHERE l.queue = q AND l.due_at <= now() AND l.priority > coalesce(after_lane::integer, -32769)
             ORDER BY l.due_at LIMIT max_lanes)
        ) u
        ORDER BY 1 LIMIT max_lanes);
    FOR lane IN
        SELECT u.p, coalesce(c.since, '-infinity') AS since
        FROM unnest(lanes) AS u(p)
        LEFT JOIN unnest(lane_priority, lane_since) AS c(p, since) ON c.p = u.p
        ORDER BY u.p
    LOOP
        SELECT coalesce(array_agg(x.ctid), '{}'), coalesce(array_agg(x.id), '{}')
        INTO got_tids, got_ids
        FROM (SELECT j.ctid, j.id FROM skiplock.jobs j
              WHERE j.state = 'available' AND j.queue = q AND j.priority = lane.p
                AND j.scheduled_at >= lane.since AND j.scheduled_at <= now()
                AND j.kind = ANY(kinds)
              ORDER BY j.scheduled_at, j.id
              LIMIT want - cardinality(ids)
              FOR NO KEY UPDATE SKIP LOCKED) x;
        tids := tids || got_tids;
        ids := ids || got_ids;
        EXIT WHEN cardinality(ids) >= want;
        read_out := read_out || lane.p;
    END LOOP;
    IF cardinality(ids) < want AND cardinality(lanes) >= max_lanes THEN
        more_after := lanes[cardinality(lanes)];
    END IF;
END;
$$;

-- The claim (sql/queue/claim.sql calls it): up to n + ahead due jobs of `kinds` from queue `q`
-- move to `running` for `worker`, in claim order, each lane read from its bound
-- (skiplock._claim_lanes says how and why), with SKIP LOCKED so many workers claim side by
-- side. A queue with a row in skiplock.queues (limited or paused) is claimed through
-- skiplock._claim_limited instead (n for free slots, `ahead` more for the worker's buffer,
-- within its limits).
--
-- `attempted_at` (API 8) is the start of the handler (docs/internals.md, "When a job
-- started"): the claim writes its clock for the n jobs that start at once and NULL for those
-- claimed ahead into the worker's buffer; the heartbeat and the ack write each job's start as
-- the worker saw it (skiplock._heartbeat, skiplock._ack).
--
-- Returns the claimed jobs, then one row with id NULL: the claim's clock (`attempted_at`) and
-- the lanes it read to their end (`exhausted`), where the next claim resumes (`lanes_after`,
-- API 9: the claim stopped at skiplock._claim_max_lanes lanes without filling its batch; the
-- worker claims again at once from there), and for a controlled queue what
-- skiplock._claim_limited reports (`controlled`, `wait_until`, `buffer_room`; its clock is
-- NULL when its pick did not go lane by lane, and the worker's bounds then stay as they were).
--
-- A row whose attempt counter is already at its maximum (2147483647: only a trusted role can
-- write one) keeps it rather than failing every claim of its queue on `integer out of range`;
-- store::claim discards such a row with the reason (sql/queue/discard_overflow.sql).
--
-- tags and meta (API 8) are returned with each job; `after_lane` (API 9) is an argument and
-- `lanes_after` a column: the forms of earlier versions are dropped first.
DROP FUNCTION IF EXISTS skiplock._claim(text, text[], integer, text, integer, smallint[], timestamptz[]);
DROP FUNCTION IF EXISTS skiplock._claim_limited(text, text[], integer, text, integer, smallint[], timestamptz[]);
CREATE OR REPLACE FUNCTION skiplock._claim(q text, kinds text[], n integer, worker text, ahead integer,
                                           lane_priority smallint[], lane_since timestamptz[],
                                           after_lane smallint DEFAULT NULL)
RETURNS TABLE (id bigint, kind text, queue text, args jsonb, priority smallint, attempt integer,
               max_attempts integer, scheduled_at timestamptz, created_at timestamptz,
               attempted_at timestamptz, tags text[], meta jsonb, controlled boolean,
               wait_until timestamptz, buffer_room integer, exhausted smallint[],
               lanes_after smallint)
-- A function's statements keep the plans made at its first calls. The claim's UPDATE finds
-- its rows by ctid; planned while the table was nearly empty (a new database, or right after
-- a TRUNCATE), a sequential scan would look as cheap and stay the plan while the table grows,
-- reading every row at every claim. Without sequential scans the plan is the TID scan however
-- small the table was.
SET enable_seqscan = off
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    pick record;
    -- The picked rows that start at once (one per free slot): their start is the claim's.
    started tid[];
BEGIN
    IF EXISTS (SELECT 1 FROM skiplock.queues c WHERE c.queue = q) THEN
        RETURN QUERY SELECT l.* FROM skiplock._claim_limited(q, kinds, n, worker, ahead,
                                                             lane_priority, lane_since, after_lane) l;
        RETURN;
    END IF;
    SELECT * INTO pick FROM skiplock._claim_lanes(
        q, kinds, greatest(coalesce(n, 0), 0) + greatest(coalesce(ahead, 0), 0),
        lane_priority, lane_since, after_lane);
    started := pick.tids[1:greatest(coalesce(n, 0), 0)];
    RETURN QUERY
    UPDATE skiplock.jobs j
    SET state = 'running',
        attempt = least(j.attempt, 2147483646) + 1,
        -- The first n of the pick start at once; the others wait in the worker's buffer, and
        -- show it: running with no attempted_at until the worker reports their start.
        attempted_at = CASE WHEN j.ctid = ANY (started) THEN now() END,
        attempted_by = worker,
        heartbeat_at = now()
    WHERE j.ctid = ANY(pick.tids)
    RETURNING j.id, j.kind, j.queue, j.args, j.priority, j.attempt, j.max_attempts,
              j.scheduled_at, j.created_at, j.attempted_at, j.tags, j.meta, false,
              NULL::timestamptz, NULL::integer, NULL::smallint[], NULL::smallint;
    RETURN QUERY SELECT NULL::bigint, NULL::text, NULL::text, NULL::jsonb, NULL::smallint, NULL::integer,
                        NULL::integer, NULL::timestamptz, NULL::timestamptz, now(), NULL::text[],
                        NULL::jsonb, false, NULL::timestamptz, NULL::integer, pick.read_out,
                        pick.more_after;
END;
$$;

-- The completer's ack (sql/queue/ack_many.sql calls it): many jobs' outcomes in one statement.
-- Fenced: a row changes only while it is still running
-- the attempt that produced the outcome, so a late ack from a rescued job never overwrites a
-- newer attempt. Returns the ids that were written.
--
-- A job leaving `running` frees a slot of its queue's concurrency limits: for a queue with
-- a concurrency limit (queue or per key) the statement sends a NOTIFY '<queue>' on skiplock._wake_channel()
-- (delivered at commit, once per queue and transaction), so a producer held back by the
-- limit in another process claims again at once, not at its next poll. For other queues it
-- costs one probe of skiplock.queues' primary key per distinct queue of the batch, in this
-- same statement.
--
-- A keyed job going back to `available` (a retry or a snooze) while another available job
-- holds its unique_key would violate the partial unique index and fail the whole batch: it is
-- cancelled instead, superseded by the holder, with the reason in its errors (nothing dropped
-- silently, the work runs once). The holder is an available job with the key, or the newest
-- job of this batch going back with it. Written here, not as a BEFORE UPDATE row trigger: such
-- a trigger makes Postgres lock (and WAL-log) every row of every claim, ack and heartbeat.
-- The holder is chosen from the statement's snapshot: if another transaction ends that newest
-- job between this statement's start and its row lock (an operator's cancel at that instant),
-- the older one is still cancelled as superseded by it (it names the job, so it can be retried).
--
-- A function whose statement is planned anew at every call (plan_cache_mode): a plan kept from
-- its first calls, made while the table was nearly empty (a new database), would scan the whole
-- table for every batch once it had grown. Not by turning sequential scans off, as
-- skiplock._claim and skiplock._heartbeat do: under a queue concurrency limit that made every
-- ack batch cost several times more (the bench's drain under a limit that never binds fell
-- from 0.9 to 0.4 of the plain drain, docs/performance.md); one planning per batch costs less.
--
-- `starts` (API 8): when each attempt's handler started, on the database's clock as the worker
-- reads it (src/worker/db_clock.rs); it becomes `attempted_at` (NULL keeps it: a job released
-- unstarted).
--
-- Flows (API 8): the finished jobs' dependents are settled here, at most 500 edges more than
-- the batch finished jobs (skiplock._settle): the ack of a fan-out's root would otherwise
-- release every child in one long statement while the worker has nothing else to run, and a
-- batch of a fan-in's children still settles all of theirs (the fan-in is released by the ack
-- of its last dependency). Since API 9 the bound covers a cancel cascade too: a chain of any
-- depth cancelled by its failed root costs this statement at most that many edges, never the
-- statement timeout that would fail the whole batch, innocent jobs included, on every retry
-- (docs/security.md, "Flows between tenants"). Each row carries the finished jobs that may
-- have edges left to settle (`unsettled`: the statement used up its edges; NULL for none, the
-- same on every row); the worker settles them in slices of their own (src/worker/acks.rs), and
-- the maintenance's sweep settles what a worker that stopped left (skiplock.settle_dependencies).
DROP FUNCTION IF EXISTS skiplock._ack(bigint[], integer[], skiplock.job_state[], timestamptz[], boolean[], text[], jsonb[]);
DROP FUNCTION IF EXISTS skiplock._ack(bigint[], integer[], skiplock.job_state[], timestamptz[], boolean[], text[], jsonb[],
                                      timestamptz[]);
CREATE OR REPLACE FUNCTION skiplock._ack(ids bigint[], attempts integer[], states skiplock.job_state[],
                                         times timestamptz[], give_backs boolean[], errs text[],
                                         results jsonb[], starts timestamptz[])
RETURNS TABLE (id bigint, unsettled bigint[])
SET plan_cache_mode = force_custom_plan
LANGUAGE plpgsql AS $$
DECLARE
    acked_ids bigint[];
    finished bigint[];
    left_over bigint[];
    back_queues text[];
    back_priorities smallint[];
    back_keys text[];
    back_times timestamptz[];
BEGIN
    WITH keyed AS MATERIALIZED (
        SELECT h.id, h.holder
        FROM (SELECT array_agg(j.id) AS ids, array_agg(j.unique_key) AS keys
              FROM unnest(ids, attempts, states) AS r(id, attempt, state)
              JOIN skiplock.jobs j ON j.id = r.id
              WHERE r.state = 'available' AND j.unique_key IS NOT NULL
                AND j.state::text = 'running' AND j.attempt = r.attempt) k,
             skiplock._superseded_by(k.ids, k.keys, array_fill(true, ARRAY[coalesce(cardinality(k.ids), 0)])) h
    ),
    acked AS (
    UPDATE skiplock.jobs j
    SET state = CASE WHEN a.holder IS NOT NULL THEN 'cancelled' ELSE a.state END,
        finalized_at = CASE WHEN a.holder IS NOT NULL OR a.state IN ('completed', 'discarded', 'cancelled')
                            THEN now() END,
        -- A job going back is due no earlier than this statement's clock (the database's, not
        -- the worker's, whose clock may lag): a claim reads each lane from a little before its
        -- own clock on (src/worker/cursor.rs), and a retry stamped with a lagging clock would sit
        -- behind that until a claim from the start of the lane found it.
        -- A job going back is also due no earlier than the end of a hold of its key
        -- (skiplock.hold_key): a retry of a job whose remote said "slow down" waits with the
        -- rest of its key. One probe of key_holds per job going back; none for a job finishing.
        scheduled_at = CASE WHEN a.state = 'available'
                            THEN skiplock._due_after_hold(j.queue, j.limit_key,
                                     greatest(coalesce(a.scheduled_at, j.scheduled_at), now()))
                            ELSE coalesce(a.scheduled_at, j.scheduled_at) END,
        attempt = CASE WHEN a.give_back THEN j.attempt - 1 ELSE j.attempt END,
        errors = CASE WHEN a.error IS NULL AND a.holder IS NULL THEN j.errors
                      ELSE j.errors
                           || CASE WHEN a.error IS NULL THEN '[]'::jsonb
                                   ELSE jsonb_build_array(jsonb_build_object(
                                       'attempt', j.attempt, 'at', now(), 'error', a.error)) END
                           || skiplock._superseded_entry(j.attempt, a.holder, j.unique_key) END,
        result = coalesce(a.result, j.result),
        attempted_at = coalesce(a.started, j.attempted_at),
        heartbeat_at = NULL
    FROM (SELECT a.*,
                 -- One map for the statement, built at the first ack going back (the sub-select is
                 -- uncorrelated: it runs once, and never for a batch without one); a batch may
                 -- name a job twice (a release at shutdown and the handler's own late ack).
                 CASE WHEN a.state = 'available'
                      THEN ((SELECT jsonb_object_agg(k.id, k.holder) FROM keyed k) ->> a.id::text)::bigint
                 END AS holder
          FROM unnest(ids, attempts, states, times, give_backs, errs, results, starts)
               AS a(id, attempt, state, scheduled_at, give_back, error, result, started)
          OFFSET 0) a -- kept a subquery, so `holder` is looked up once per row, not once per use
    WHERE j.id = a.id
      -- Compared as text on purpose: `state = 'running'` would let the planner drive the join
      -- from the partial index of running rows (estimated near-empty by stale statistics) and
      -- rescan the array for every row, quadratic in the batch. This way the plan is always
      -- array -> primary key, and rows are locked in array order (callers sort by id, so the
      -- heartbeat and ack statements never deadlock each other).
      AND j.state::text = 'running'
      AND j.attempt = a.attempt
    RETURNING j.id, j.queue, j.finalized_at IS NOT NULL AS finished, j.state = 'available' AS back,
              j.priority, j.limit_key, j.scheduled_at
    ),
    woken AS (
        SELECT pg_notify(skiplock._wake_channel(), q.queue)
        FROM (SELECT DISTINCT acked.queue FROM acked) q
        WHERE EXISTS (SELECT 1 FROM skiplock.queues c
                      WHERE c.queue = q.queue
                        AND (c.concurrency IS NOT NULL OR c.key_concurrency IS NOT NULL))
    )
    -- The uncorrelated sub-select runs once (an InitPlan), so the notifications are sent.
    SELECT array_agg(acked.id), array_agg(acked.id) FILTER (WHERE acked.finished),
           array_agg(acked.queue) FILTER (WHERE acked.back), array_agg(acked.priority) FILTER (WHERE acked.back),
           array_agg(acked.limit_key) FILTER (WHERE acked.back),
           array_agg(acked.scheduled_at) FILTER (WHERE acked.back)
    INTO acked_ids, finished, back_queues, back_priorities, back_keys, back_times
    FROM acked WHERE (SELECT count(*) FROM woken) >= 0;
    -- A job going back (a retry, a snooze) is in a lane that may have gone to sleep or away
    -- while it ran (skiplock._lanes_need); nothing for a batch of finished jobs.
    IF back_queues IS NOT NULL THEN
        PERFORM skiplock._lanes_need(back_queues, back_priorities, back_keys, back_times);
    END IF;
    -- Flows and watchers (sql/api/12_flows.sql): two index probes for a batch without either.
    IF finished IS NOT NULL THEN
        left_over := skiplock._settle(finished, 500 + cardinality(finished));
    END IF;
    RETURN QUERY SELECT a.id, left_over FROM unnest(acked_ids) AS a(id);
END;
$$;

-- The heartbeat (sql/queue/heartbeat_many.sql calls it): refreshes heartbeat_at of the
-- (id, attempt) pairs a worker still runs and returns their ids; ids missing were rescued or
-- cancelled elsewhere, and the worker tells their handlers to stop. A function for its plan,
-- as skiplock._ack. `starts` (API 8): each started job's start (NULL: still in the buffer),
-- written to `attempted_at`, so a long job claimed ahead shows its start before its ack.
DROP FUNCTION IF EXISTS skiplock._heartbeat(bigint[], integer[]);
CREATE OR REPLACE FUNCTION skiplock._heartbeat(ids bigint[], attempts integer[], starts timestamptz[])
RETURNS TABLE (id bigint)
SET enable_seqscan = off
LANGUAGE plpgsql AS $$
BEGIN
    RETURN QUERY
    UPDATE skiplock.jobs j
    SET heartbeat_at = now(),
        attempted_at = coalesce(a.started, j.attempted_at)
    FROM unnest(ids, attempts, starts) AS a(id, attempt, started)
    WHERE j.id = a.id
      -- Compared as text on purpose: `state = 'running'` would let the planner drive the join
      -- from the partial index of running rows (estimated near-empty by stale statistics) and
      -- rescan the array for every row, quadratic in the batch. This way the plan is always
      -- array -> primary key, and rows are locked in array order (callers sort by id, so the
      -- heartbeat and ack statements never deadlock each other).
      AND j.state::text = 'running'
      AND j.attempt = a.attempt
    RETURNING j.id;
END;
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

-- Cancel a job that has not finished. A running job's late acknowledgement is fenced off
-- (the row is no longer `running`); the interrupted attempt is recorded in `errors` as
-- {attempt, at, error: 'cancelled while running'}, the attempt is recorded as taken away
-- (jobs.taken_attempt: a replace keeps counting from it, skiplock._enqueue) and
-- the stale `heartbeat_at` is cleared, so the row itself says an attempt was cut short.
-- SECURITY DEFINER (fixed search_path, every name qualified), like retry and the bulk
-- functions below: the operator role (skiplock_operator, the console's login) may cancel and
-- retry through these functions without any write privilege on skiplock.jobs.
CREATE OR REPLACE FUNCTION skiplock.cancel(id bigint) RETURNS skiplock.job_state
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    cur skiplock.job_state;
    q text;
BEGIN
    SELECT j.state, j.queue INTO cur, q FROM skiplock.jobs j WHERE j.id = cancel.id FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'skiplock: job % does not exist', cancel.id USING ERRCODE = 'P0002';
    END IF;
    IF cur NOT IN ('available', 'running', 'waiting') THEN
        RAISE EXCEPTION 'skiplock: job % is already % and cannot be cancelled', cancel.id, cur USING ERRCODE = '55000';
    END IF;
    UPDATE skiplock.jobs j SET state = 'cancelled', finalized_at = now(), heartbeat_at = NULL,
        errors = CASE WHEN cur = 'running'
                      THEN j.errors || jsonb_build_array(jsonb_build_object(
                               'attempt', j.attempt, 'at', now(), 'error', 'cancelled while running'))
                      ELSE j.errors END,
        taken_attempt = CASE WHEN cur = 'running' THEN j.attempt ELSE j.taken_attempt END
    WHERE j.id = cancel.id;
    -- A running job no longer counts against its queue's concurrency limits: a producer held
    -- back by one claims at once (delivered at commit), not at its next poll.
    IF cur = 'running' THEN
        PERFORM pg_notify(skiplock._wake_channel(), q);
    END IF;
    -- Its dependents are cancelled with it (or run, if they asked to), and watchers told: at
    -- most 1,000 edges in this statement, cancel cascades included; the maintenance's sweep
    -- goes on with a deeper cascade (skiplock.settle_dependencies).
    PERFORM skiplock._settle(ARRAY[cancel.id], 1000);
    RETURN 'cancelled';
END;
$$;

-- Make a finished (discarded, cancelled or completed) or waiting job available now. A job out
-- of attempts gets one more.
CREATE OR REPLACE FUNCTION skiplock.retry(id bigint) RETURNS skiplock.job_state
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    cur skiplock.job_state;
    q text;
BEGIN
    SELECT j.state, j.queue INTO cur, q FROM skiplock.jobs j WHERE j.id = retry.id FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'skiplock: job % does not exist', retry.id USING ERRCODE = 'P0002';
    END IF;
    IF cur = 'running' THEN
        RAISE EXCEPTION 'skiplock: job % is running and cannot be retried', retry.id USING ERRCODE = '55000';
    END IF;
    IF cur = 'waiting' THEN
        RAISE EXCEPTION 'skiplock: job % waits for its dependencies (skiplock.dependency_results) and cannot be retried',
            retry.id USING ERRCODE = '55000';
    END IF;
    IF cur <> 'available' AND EXISTS (
        SELECT 1 FROM skiplock.jobs o, skiplock.jobs j
        WHERE j.id = retry.id AND o.kind = j.kind AND o.queue = j.queue AND o.unique_key = j.unique_key
          AND o.state IN ('available', 'waiting') AND o.id <> j.id) THEN
        RAISE EXCEPTION 'skiplock: job % cannot be retried: another available job holds its unique_key', retry.id
            USING ERRCODE = '23505';
    END IF;
    UPDATE skiplock.jobs j
    SET state = 'available', scheduled_at = now(), finalized_at = NULL,
        max_attempts = greatest(j.max_attempts, j.attempt + 1)
    WHERE j.id = retry.id;
    PERFORM skiplock._lanes_need(ARRAY[j.queue], ARRAY[j.priority], ARRAY[j.limit_key], ARRAY[j.scheduled_at])
    FROM skiplock.jobs j WHERE j.id = retry.id;
    PERFORM pg_notify(skiplock._wake_channel(), q);
    -- Its flow comes back to life (sql/api/12_flows.sql): it may wait again for dependencies.
    PERFORM skiplock._revive(ARRAY[retry.id]);
    RETURN (SELECT j.state FROM skiplock.jobs j WHERE j.id = retry.id);
END;
$$;

-- '%<s>%' with LIKE's wildcards in `s` escaped (LIKE's default escape is the backslash).
CREATE OR REPLACE FUNCTION skiplock._like_pattern(s text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT '%' || replace(replace(replace(s, '\', '\\'), '%', '\%'), '_', '\_') || '%'
$$;

-- Whether job `j` matches an operator's filter (NULL: any): state, kind, queue, `search`,
-- a plain substring (no wildcards: %, _ and \ are matched literally) looked for, ignoring
-- case, in the job's args or errors, `tag`, one of the job's tags, and `meta`, a JSON object
-- the job's meta contains (jsonb @>). Shared by the bulk functions below and the console's
-- job list (sql/web/jobs_*.sql), so "the filtered set" means the same in both. The 5-argument
-- form of earlier versions is dropped so that their calls resolve to this one.
DROP FUNCTION IF EXISTS skiplock._job_matches(skiplock.jobs, skiplock.job_state, text, text, text);
CREATE OR REPLACE FUNCTION skiplock._job_matches(j skiplock.jobs, state skiplock.job_state, kind text,
                                                 queue text, search text, tag text DEFAULT NULL,
                                                 meta jsonb DEFAULT NULL)
RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
    SELECT (_job_matches.state IS NULL OR j.state = _job_matches.state)
       AND (_job_matches.kind IS NULL OR j.kind = _job_matches.kind)
       AND (_job_matches.queue IS NULL OR j.queue = _job_matches.queue)
       AND (_job_matches.search IS NULL OR _job_matches.search = ''
            OR j.args::text ILIKE skiplock._like_pattern(_job_matches.search)
            OR j.errors::text ILIKE skiplock._like_pattern(_job_matches.search))
       AND (_job_matches.tag IS NULL OR _job_matches.tag = '' OR _job_matches.tag = ANY (j.tags))
       AND (_job_matches.meta IS NULL OR j.meta @> _job_matches.meta)
$$;

-- Refuses a bulk call's bad arguments in one line (SQLSTATE 22023).
CREATE OR REPLACE FUNCTION skiplock._check_bulk(what text, state skiplock.job_state, allowed skiplock.job_state[],
                                               max_rows integer)
RETURNS void LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF state IS NOT NULL AND NOT state = ANY (allowed) THEN
        RAISE EXCEPTION 'skiplock: % takes jobs in state %, not %', what, array_to_string(allowed, ', '), state
            USING ERRCODE = '22023';
    END IF;
    IF max_rows IS NULL OR max_rows < 1 OR max_rows > 100000 THEN
        RAISE EXCEPTION 'skiplock: % max_rows must be 1 to 100000, got %', what, coalesce(max_rows::text, 'NULL')
            USING ERRCODE = '22023';
    END IF;
END;
$$;

-- Bulk retry: the finished jobs (completed, discarded, cancelled; one state or all of them)
-- of a kind, a queue, a search, a tag and a meta (each NULL: any; skiplock._job_matches),
-- oldest first, at most `max_rows` per call
-- (call again for more); each as skiplock.retry does it (available now, one more attempt if
-- it was out of them). A job whose unique_key an available job holds is left as it is (as
-- skiplock.retry refuses it), and of several with one key only the newest is retried. Rows
-- another transaction holds are skipped. Returns how many jobs were retried.
DROP FUNCTION IF EXISTS skiplock.retry_jobs(skiplock.job_state, text, text, text, integer);
CREATE OR REPLACE FUNCTION skiplock.retry_jobs(state skiplock.job_state DEFAULT NULL, kind text DEFAULT NULL,
                                               queue text DEFAULT NULL, search text DEFAULT NULL,
                                               max_rows integer DEFAULT 10000,
                                               tag text DEFAULT NULL, meta jsonb DEFAULT NULL)
RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    n bigint;
    retried bigint[];
    woken_queues bigint;
BEGIN
    PERFORM skiplock._check_bulk('retry_jobs', retry_jobs.state,
                                 ARRAY['completed', 'discarded', 'cancelled']::skiplock.job_state[], retry_jobs.max_rows);
    WITH locked AS (
        SELECT j.id, j.kind, j.queue, j.unique_key
        FROM skiplock.jobs j
        WHERE j.state IN ('completed', 'discarded', 'cancelled')
          AND skiplock._job_matches(j, retry_jobs.state, retry_jobs.kind, retry_jobs.queue, retry_jobs.search,
                                      retry_jobs.tag, retry_jobs.meta)
        ORDER BY j.id
        LIMIT retry_jobs.max_rows
        FOR NO KEY UPDATE SKIP LOCKED
    ), pick AS (
        SELECT l.id FROM (
            SELECT l.id, l.kind, l.queue, l.unique_key,
                   row_number() OVER (PARTITION BY l.kind, l.queue, l.unique_key ORDER BY l.id DESC) AS rn
            FROM locked l) l
        WHERE l.unique_key IS NULL
           OR (l.rn = 1 AND NOT EXISTS (SELECT 1 FROM skiplock.jobs o
                                        WHERE o.kind = l.kind AND o.queue = l.queue
                                          AND o.unique_key = l.unique_key AND o.state IN ('available', 'waiting')))
    ), moved AS (
        UPDATE skiplock.jobs j
        SET state = 'available', scheduled_at = now(), finalized_at = NULL,
            max_attempts = greatest(j.max_attempts, j.attempt + 1)
        FROM pick
        WHERE j.id = pick.id
        RETURNING j.id, j.queue, j.priority, j.limit_key, j.scheduled_at
    ), woken AS (
        SELECT pg_notify(skiplock._wake_channel(), q.queue) FROM (SELECT DISTINCT m.queue FROM moved m) q
    ), laned AS (
        SELECT skiplock._lanes_need(array_agg(m.queue), array_agg(m.priority), array_agg(m.limit_key),
                                    array_agg(m.scheduled_at)) FROM moved m
    )
    SELECT (SELECT array_agg(m.id) FROM moved m), (SELECT count(*) FROM woken) + (SELECT count(*) FROM laned)
    INTO retried, woken_queues;
    n := coalesce(cardinality(retried), 0);
    IF n > 0 THEN
        PERFORM skiplock._revive(retried);
    END IF;
    RETURN n;
END;
$$;

-- Bulk cancel: the unfinished jobs (available, running, waiting; one state or all) of a kind, a queue,
-- a search, a tag and a meta (each NULL: any; skiplock._job_matches), oldest first, at most `max_rows` per call; each as
-- skiplock.cancel does it (a running job's late acknowledgement is fenced off). Rows another
-- transaction holds (being claimed or acknowledged right now) are skipped. Returns how many
-- jobs were cancelled.
DROP FUNCTION IF EXISTS skiplock.cancel_jobs(skiplock.job_state, text, text, text, integer);
CREATE OR REPLACE FUNCTION skiplock.cancel_jobs(state skiplock.job_state DEFAULT NULL, kind text DEFAULT NULL,
                                                queue text DEFAULT NULL, search text DEFAULT NULL,
                                                max_rows integer DEFAULT 10000,
                                                tag text DEFAULT NULL, meta jsonb DEFAULT NULL)
RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    n bigint;
    cancelled bigint[];
BEGIN
    PERFORM skiplock._check_bulk('cancel_jobs', cancel_jobs.state,
                                 ARRAY['available', 'running', 'waiting']::skiplock.job_state[], cancel_jobs.max_rows);
    WITH locked AS (
        SELECT j.id, j.state, j.queue
        FROM skiplock.jobs j
        WHERE j.state IN ('available', 'running', 'waiting')
          AND skiplock._job_matches(j, cancel_jobs.state, cancel_jobs.kind, cancel_jobs.queue, cancel_jobs.search,
                                      cancel_jobs.tag, cancel_jobs.meta)
        ORDER BY j.id
        LIMIT cancel_jobs.max_rows
        FOR NO KEY UPDATE SKIP LOCKED
    ), moved AS (
        -- As skiplock.cancel: a running job's interrupted attempt is recorded, its heartbeat cleared.
        UPDATE skiplock.jobs j SET state = 'cancelled', finalized_at = now(), heartbeat_at = NULL,
            errors = CASE WHEN j.state = 'running'
                          THEN j.errors || jsonb_build_array(jsonb_build_object(
                                   'attempt', j.attempt, 'at', now(), 'error', 'cancelled while running'))
                          ELSE j.errors END,
            taken_attempt = CASE WHEN j.state = 'running' THEN j.attempt ELSE j.taken_attempt END
        FROM locked WHERE j.id = locked.id
        RETURNING j.id
    ), woken AS (
        -- As skiplock.cancel: a queue whose running jobs were cancelled has slots free under
        -- its concurrency limits; a producer held back by one claims at once.
        SELECT pg_notify(skiplock._wake_channel(), q.queue)
        FROM (SELECT DISTINCT l.queue FROM locked l JOIN moved m ON m.id = l.id
              WHERE l.state = 'running') q
    )
    -- The uncorrelated sub-select runs once (an InitPlan), so the notifications are sent.
    SELECT array_agg(moved.id) INTO cancelled FROM moved WHERE (SELECT count(*) FROM woken) >= 0;
    n := coalesce(cardinality(cancelled), 0);
    IF n > 0 THEN
        -- As skiplock.cancel, with 1,000 edges more than it cancelled jobs (as the ack).
        PERFORM skiplock._settle(cancelled, (1000 + n)::integer);
    END IF;
    RETURN n;
END;
$$;

-- Hold a limit key (docs/sql-reference.md, "skiplock.hold_key"): until `until`, no job of
-- `queue` with this limit_key is due. The key's waiting jobs due before then are moved to
-- `until` (their scheduled_at shows the hold in psql), an enqueue of the key meanwhile is due
-- no earlier (skiplock._enqueue_outcome), and the hold is a row of skiplock.key_holds; a later
-- hold of the same key extends it, an earlier one (or one within a second of it) changes
-- nothing. Jobs already claimed (running, or waiting in a worker's buffer) are not stopped; a
-- job of the key going back by its own retry or snooze (skiplock._ack) is due no earlier than
-- the hold's end, one put back by skiplock.retry or reschedule when the operator says. What a
-- handler's `Outcome::SnoozeKey` calls (the 429 / Retry-After case); the operator's too.
-- Returns how many waiting jobs it moved. Holds of one key are taken one at a time (a
-- transaction-scoped advisory lock on the key): two moving the same rows in different orders
-- could deadlock.
CREATE OR REPLACE FUNCTION skiplock.hold_key(queue text, limit_key text, until timestamptz)
RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    n bigint;
BEGIN
    IF hold_key.queue IS NULL OR hold_key.limit_key IS NULL OR hold_key.until IS NULL THEN
        RAISE EXCEPTION 'skiplock: hold_key needs a queue, a limit_key and an until time' USING ERRCODE = '22023';
    END IF;
    PERFORM skiplock._check_time('until', hold_key.until);
    PERFORM skiplock._check_limit_key(hold_key.limit_key);
    PERFORM pg_advisory_xact_lock(hashtext('skiplock.hold_key'),
                                  hashtext(hold_key.queue || E'\x1f' || hold_key.limit_key));
    -- Many running jobs of a key answering "slow down" at once ask for nearly the same hold:
    -- one within a second of the current one moves nothing again.
    IF EXISTS (SELECT 1 FROM skiplock.key_holds h
               WHERE h.queue = hold_key.queue AND h.limit_key = hold_key.limit_key
                 AND h.until >= hold_key.until - interval '1 second') THEN
        RETURN 0;
    END IF;
    INSERT INTO skiplock.key_holds AS h (queue, limit_key, until)
    VALUES (hold_key.queue, hold_key.limit_key, hold_key.until)
    ON CONFLICT ON CONSTRAINT key_holds_pkey DO UPDATE SET until = greatest(h.until, EXCLUDED.until);
    UPDATE skiplock.jobs j SET scheduled_at = hold_key.until
    WHERE j.state IN ('available', 'waiting') AND j.queue = hold_key.queue AND j.limit_key = hold_key.limit_key
      AND j.scheduled_at < hold_key.until;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END;
$$;

-- Cancel by unique key: the unfinished jobs (available, due or later, and running) whose
-- unique_key is `key`, of `kind` and in `queue` when given (NULL: any), each by skiplock.cancel
-- (a running job's late acknowledgement is fenced off, its interrupted attempt recorded).
-- skiplock.cancel waits for a row another transaction holds (a claim or an ack in flight; at
-- most lock_timeout), so a job with the key is never skipped; one that finished meanwhile is
-- passed over. Returns how many jobs were cancelled: 0 when none with the key was unfinished.
CREATE OR REPLACE FUNCTION skiplock.cancel_by_key(key text, kind text DEFAULT NULL, queue text DEFAULT NULL)
RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    n bigint := 0;
    jid bigint;
BEGIN
    IF cancel_by_key.key IS NULL OR cancel_by_key.key = '' THEN
        RAISE EXCEPTION 'skiplock: cancel_by_key needs a unique_key' USING ERRCODE = '22023';
    END IF;
    -- One state at a time, so each is read from its partial index (the keyed available jobs',
    -- the running jobs'), not from the whole table.
    FOR jid IN
        SELECT j.id FROM skiplock.jobs j
        WHERE j.unique_key = cancel_by_key.key AND j.state IN ('available', 'waiting')
          AND (cancel_by_key.kind IS NULL OR j.kind = cancel_by_key.kind)
          AND (cancel_by_key.queue IS NULL OR j.queue = cancel_by_key.queue)
        UNION ALL
        SELECT j.id FROM skiplock.jobs j
        WHERE j.unique_key = cancel_by_key.key AND j.state = 'running'
          AND (cancel_by_key.kind IS NULL OR j.kind = cancel_by_key.kind)
          AND (cancel_by_key.queue IS NULL OR j.queue = cancel_by_key.queue)
        ORDER BY 1
    LOOP
        BEGIN
            PERFORM skiplock.cancel(jid);
            n := n + 1;
        EXCEPTION WHEN object_not_in_prerequisite_state OR no_data_found THEN
            NULL; -- finished (or deleted) since it was read
        END;
    END LOOP;
    RETURN n;
END;
$$;

-- Reschedule waiting jobs: the `available` ones among `ids`, or those whose unique_key is
-- `key` (of `kind` and in `queue` when given), get a new run_at, priority and max_attempts
-- (each NULL: unchanged). A running or finished job is left as it is (its attempt decides;
-- skiplock.retry brings a finished one back). A run_at in the past means now, as for a retry:
-- a claim reads each lane from a little before its own clock on (src/worker/cursor.rs).
-- Waits for rows another transaction holds, as skiplock.cancel_by_key. Returns the ids
-- rescheduled.
CREATE OR REPLACE FUNCTION skiplock.reschedule(ids bigint[] DEFAULT NULL, key text DEFAULT NULL,
                                               kind text DEFAULT NULL, queue text DEFAULT NULL,
                                               run_at timestamptz DEFAULT NULL,
                                               priority smallint DEFAULT NULL,
                                               max_attempts integer DEFAULT NULL)
RETURNS SETOF bigint LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
-- Planned with the call's values: a plan kept for "ids or key" would read neither index.
SET plan_cache_mode = force_custom_plan AS $$
BEGIN
    IF (reschedule.ids IS NULL) = (reschedule.key IS NULL) THEN
        RAISE EXCEPTION 'skiplock: reschedule takes ids or a key (exactly one)' USING ERRCODE = '22023';
    END IF;
    IF reschedule.key = '' THEN
        RAISE EXCEPTION 'skiplock: reschedule needs a non-empty unique_key' USING ERRCODE = '22023';
    END IF;
    IF reschedule.run_at IS NOT NULL THEN
        PERFORM skiplock._check_time('run_at', reschedule.run_at);
    END IF;
    IF reschedule.max_attempts IS NOT NULL AND reschedule.max_attempts < 1 THEN
        RAISE EXCEPTION 'skiplock: max_attempts must be at least 1, got %', reschedule.max_attempts
            USING ERRCODE = '22023';
    END IF;
    RETURN QUERY
    WITH locked AS (
        SELECT j.id
        FROM skiplock.jobs j
        WHERE j.state IN ('available', 'waiting')
          AND (reschedule.ids IS NULL OR j.id = ANY (reschedule.ids))
          AND (reschedule.key IS NULL OR j.unique_key = reschedule.key)
          AND (reschedule.kind IS NULL OR j.kind = reschedule.kind)
          AND (reschedule.queue IS NULL OR j.queue = reschedule.queue)
        ORDER BY j.id
        FOR NO KEY UPDATE
    ), moved AS (
        UPDATE skiplock.jobs j
        SET scheduled_at = CASE WHEN reschedule.run_at IS NULL THEN j.scheduled_at
                                ELSE greatest(reschedule.run_at, now()) END,
            priority = coalesce(reschedule.priority, j.priority),
            max_attempts = coalesce(reschedule.max_attempts, j.max_attempts)
        FROM locked WHERE j.id = locked.id AND j.state IN ('available', 'waiting')
        RETURNING j.id, j.queue, j.state, j.priority, j.limit_key, j.scheduled_at
    ), woken AS (
        SELECT pg_notify(skiplock._wake_channel(), q.queue) FROM (SELECT DISTINCT m.queue FROM moved m) q
    ), laned AS (
        -- A job moved to another priority or earlier needs its lane (skiplock._lanes_need).
        SELECT skiplock._lanes_need(array_agg(m.queue), array_agg(m.priority), array_agg(m.limit_key),
                                    array_agg(m.scheduled_at))
        FROM moved m WHERE m.state = 'available'
    )
    SELECT m.id FROM moved m WHERE (SELECT count(*) FROM woken) + (SELECT count(*) FROM laned) >= 0 ORDER BY m.id;
END;
$$;

-- Counts per queue and state, for psql and `skiplock stats`, with the queue's control
-- settings (skiplock.queues, sql/api/15_control.sql; NULL: no limit).
CREATE OR REPLACE VIEW skiplock.queue_stats AS
SELECT s.queue, s.state, s.count, s.oldest_scheduled_at,
       coalesce(c.paused, false) AS paused, c.concurrency, c.key_concurrency, c.key_rate, c.key_period
FROM (SELECT j.queue, j.state, count(*) AS count, min(j.scheduled_at) AS oldest_scheduled_at
      FROM skiplock.jobs j
      GROUP BY j.queue, j.state) s
LEFT JOIN skiplock.queues c ON c.queue = s.queue;
