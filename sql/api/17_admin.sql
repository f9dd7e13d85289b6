-- skiplock core SQL API: what an operator does to jobs: cancel, retry (one or in bulk), hold a key, cancel by
-- key, reschedule, and the queue_stats view.
-- Installed (CREATE OR REPLACE) by `skiplock migrate` after the schema migrations, in the order of
-- src/store/schema.rs (api_files).

-- The one way a job is cancelled (skiplock.cancel, skiplock.cancel_jobs; cancel_by_key through
-- cancel): the unfinished jobs among `ids`, which the caller has locked, become `cancelled`. A
-- running job's late acknowledgement is fenced off (the row is no longer `running`); its
-- interrupted attempt is recorded in `errors` as {attempt, at, error: 'cancelled while
-- running'}, the attempt is recorded as taken away (jobs.taken_attempt: a replace keeps
-- counting from it, skiplock._enqueue) and the stale `heartbeat_at` is cleared, so the row
-- itself says an attempt was cut short. A queue whose running jobs were cancelled has slots free
-- under its concurrency limits: its producers are woken (delivered at commit), not left to
-- their next poll. Then their dependents are settled, at most `settle_edges` edges in this
-- statement (skiplock._settle). Returns the ids it cancelled.
CREATE OR REPLACE FUNCTION skiplock._cancel_locked(ids bigint[], settle_edges integer) RETURNS bigint[]
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    cancelled bigint[];
BEGIN
    WITH before AS (
        SELECT j.id, j.state, j.queue FROM skiplock.jobs j
        WHERE j.id = ANY(_cancel_locked.ids) AND j.state IN ('available', 'running', 'waiting')
    ), moved AS (
        UPDATE skiplock.jobs j SET state = 'cancelled', finalized_at = now(), heartbeat_at = NULL,
            errors = CASE WHEN j.state = 'running'
                          THEN j.errors || jsonb_build_array(jsonb_build_object(
                                   'attempt', j.attempt, 'at', now(), 'error', 'cancelled while running'))
                          ELSE j.errors END,
            taken_attempt = CASE WHEN j.state = 'running' THEN j.attempt ELSE j.taken_attempt END
        FROM before b WHERE j.id = b.id
        RETURNING j.id
    ), woken AS (
        SELECT pg_notify(skiplock._wake_channel(), q.queue)
        FROM (SELECT DISTINCT b.queue FROM before b WHERE b.state = 'running') q
    )
    -- The uncorrelated sub-select runs once (an InitPlan), so the notifications are sent.
    SELECT array_agg(moved.id) INTO cancelled FROM moved WHERE (SELECT count(*) FROM woken) >= 0;
    IF cancelled IS NOT NULL THEN
        PERFORM skiplock._settle(cancelled, _cancel_locked.settle_edges);
    END IF;
    RETURN coalesce(cancelled, '{}');
END;
$$;

-- Cancel a job that has not finished (skiplock._cancel_locked: a running job's late
-- acknowledgement is fenced off, its interrupted attempt recorded).
-- SECURITY DEFINER (fixed search_path, every name qualified), like retry and the bulk
-- functions below: the operator role (skiplock_operator, the console's login) may cancel and
-- retry through these functions without any write privilege on skiplock.jobs.
CREATE OR REPLACE FUNCTION skiplock.cancel(id bigint) RETURNS skiplock.job_state
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    cur skiplock.job_state;
BEGIN
    SELECT j.state INTO cur FROM skiplock.jobs j WHERE j.id = cancel.id FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'skiplock: job % does not exist', cancel.id USING ERRCODE = 'P0002';
    END IF;
    IF cur NOT IN ('available', 'running', 'waiting') THEN
        RAISE EXCEPTION 'skiplock: job % is already % and cannot be cancelled', cancel.id, cur USING ERRCODE = '55000';
    END IF;
    -- Its dependents are cancelled with it (or run, if they asked to), and watchers told: at
    -- most 1,000 edges in this statement, cancel cascades included; the maintenance's sweep
    -- goes on with a deeper cascade (skiplock.settle_dependencies).
    PERFORM skiplock._cancel_locked(ARRAY[cancel.id], 1000);
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
-- job list (crates/skiplock-console/sql/web/jobs_*.sql), so "the filtered set" means the same
-- in both. The 5-argument form of earlier versions is dropped so that their calls resolve to
-- this one.
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
    locked bigint[];
BEGIN
    PERFORM skiplock._check_bulk('cancel_jobs', cancel_jobs.state,
                                 ARRAY['available', 'running', 'waiting']::skiplock.job_state[], cancel_jobs.max_rows);
    SELECT array_agg(l.id) INTO locked
    FROM (SELECT j.id
          FROM skiplock.jobs j
          WHERE j.state IN ('available', 'running', 'waiting')
            AND skiplock._job_matches(j, cancel_jobs.state, cancel_jobs.kind, cancel_jobs.queue, cancel_jobs.search,
                                        cancel_jobs.tag, cancel_jobs.meta)
          ORDER BY j.id
          LIMIT cancel_jobs.max_rows
          FOR NO KEY UPDATE SKIP LOCKED) l;
    n := coalesce(cardinality(locked), 0);
    IF n > 0 THEN
        -- As skiplock.cancel, with 1,000 edges more than it cancels jobs (as the ack).
        n := cardinality(skiplock._cancel_locked(locked, (1000 + n)::integer));
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
