-- Maintenance SQL API: enqueueing one period of a periodic job, exactly once across every
-- process that runs the scheduler. Installed (CREATE OR REPLACE) by `skiplock migrate`.

-- Enqueue the job of period `period_start` of periodic job `name`, unless some process already
-- did. Returns the new job's id, or NULL when nothing was enqueued because:
--   * the period is already recorded (another process, or this one, enqueued it), or
--   * a later period is already recorded (a process with a lagging clock), or
--   * the periodic job has never run and the period started before `first_after` (the
--     caller's start): a newly declared job starts with its next fire time, not at deploy.
-- The run row and the job are written in one transaction, so a period is never recorded
-- without its job or enqueued twice: an enqueue that raises (its unique_key held by another
-- kind or queue, say) records nothing, and the scheduler tries the period again on its next
-- tick, recording the failure in skiplock.periodic_jobs meanwhile; an enqueue that succeeds
-- clears that record.
CREATE OR REPLACE FUNCTION skiplock.enqueue_periodic(
    name text,
    period_start timestamptz,
    first_after timestamptz,
    kind text,
    args jsonb DEFAULT '{}',
    queue text DEFAULT 'default',
    priority smallint DEFAULT 0,
    max_attempts integer DEFAULT 25,
    unique_key text DEFAULT NULL,
    on_conflict text DEFAULT 'keep'
) RETURNS bigint
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    new_id bigint;
BEGIN
    IF enqueue_periodic.name IS NULL OR enqueue_periodic.name = '' THEN
        RAISE EXCEPTION 'skiplock: periodic job name must not be empty' USING ERRCODE = '22023';
    END IF;
    IF enqueue_periodic.period_start IS NULL THEN
        RAISE EXCEPTION 'skiplock: period_start must not be NULL' USING ERRCODE = '22023';
    END IF;
    -- Stored in periodic_runs. (first_after is only compared: '-infinity' means "any".)
    PERFORM skiplock._check_time('period_start', enqueue_periodic.period_start);
    IF EXISTS (SELECT 1 FROM skiplock.periodic_runs r
               WHERE r.name = enqueue_periodic.name AND r.period_start > enqueue_periodic.period_start) THEN
        RETURN NULL;
    END IF;
    IF enqueue_periodic.period_start < enqueue_periodic.first_after
       AND NOT EXISTS (SELECT 1 FROM skiplock.periodic_runs r WHERE r.name = enqueue_periodic.name) THEN
        RETURN NULL;
    END IF;
    INSERT INTO skiplock.periodic_runs (name, period_start)
    VALUES (enqueue_periodic.name, enqueue_periodic.period_start)
    ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    -- The built-in maintenance jobs live in skiplock's own queue (`skiplock.` prefix), which
    -- skiplock.enqueue refuses (skiplock._reserved_job): the scheduler, a worker-role
    -- function, may put jobs there; every other periodic job obeys skiplock.enqueue's rules.
    IF starts_with(enqueue_periodic.queue, 'skiplock.')
       AND skiplock._reserved_key_prefix(enqueue_periodic.unique_key) IS NULL THEN
        new_id := skiplock._enqueue(enqueue_periodic.kind, enqueue_periodic.args, enqueue_periodic.queue, now(),
                                    enqueue_periodic.priority, enqueue_periodic.max_attempts,
                                    enqueue_periodic.unique_key, enqueue_periodic.on_conflict);
    ELSE
        new_id := skiplock.enqueue(enqueue_periodic.kind, enqueue_periodic.args, enqueue_periodic.queue, now(),
                                   enqueue_periodic.priority, enqueue_periodic.max_attempts,
                                   enqueue_periodic.unique_key, enqueue_periodic.on_conflict);
    END IF;
    UPDATE skiplock.periodic_runs r SET job_id = new_id
    WHERE r.name = enqueue_periodic.name AND r.period_start = enqueue_periodic.period_start;
    -- A failed enqueue of an earlier period is over (recorded by the scheduler,
    -- sql/maintenance/record_periodic_failure.sql); the guard keeps the common case a read.
    UPDATE skiplock.periodic_jobs p
    SET last_error = NULL, last_error_at = NULL, last_error_period = NULL
    WHERE p.name = enqueue_periodic.name AND p.last_error IS NOT NULL;
    RETURN new_id;
END;
$$;

-- The lanes' upkeep (migrations/core/0011_sleeping_lanes.sql; docs/internals.md, "Claims when
-- Postgres cannot vacuum"), run by retention (src/store/maintenance.rs `tidy_lanes`) in three
-- steps, each its own transaction:
--   1. skiplock._lanes_mark: wakes the lanes whose time came, registers lanes (and fair
--      queues' keys) with available jobs and no row (a plain UPDATE of `priority`, `queue` or
--      `limit_key`), and marks `pending` the rows it means to change: a lane's extra rows, an
--      awake lane with no job due, a sleeping lane with no job at all.
--   2. skiplock._lanes_marked lists the pending rows and the transactions writing jobs right
--      then; once none of them is left (skiplock._lanes_writers_left), every job an enqueue
--      made while relying on a row now pending is visible (an enqueue relies on no pending
--      row, and writes its jobs before it looks: skiplock._lanes_need);
--   3. skiplock._lanes_settle decides each listed row again on what it sees now: removed when
--      its lane has no available job or another row serves it, else awake, or asleep until
--      its lane's earliest job.
-- A claim never waits for any of it, and no row changes more than twice per pass.
CREATE OR REPLACE FUNCTION skiplock._lanes_mark() RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    n bigint;
    m bigint;
BEGIN
    UPDATE skiplock.lanes l SET due_at = NULL WHERE l.due_at <= now() AND NOT l.pending;
    UPDATE skiplock.key_lanes l SET due_at = NULL WHERE l.due_at <= now() AND NOT l.pending;
    -- Every lane with available jobs: a loose index scan of jobs_claim_idx, one probe each.
    INSERT INTO skiplock.lanes (queue, priority)
    WITH RECURSIVE lane AS (
        (SELECT j.queue, j.priority FROM skiplock.jobs j WHERE j.state = 'available'
         ORDER BY j.queue, j.priority LIMIT 1)
        UNION ALL
        SELECT nx.queue, nx.priority FROM lane c
        CROSS JOIN LATERAL (SELECT j.queue, j.priority FROM skiplock.jobs j
                            WHERE j.state = 'available' AND (j.queue, j.priority) > (c.queue, c.priority)
                            ORDER BY j.queue, j.priority LIMIT 1) nx
    )
    SELECT lane.queue, lane.priority FROM lane
    WHERE NOT EXISTS (SELECT 1 FROM skiplock.lanes l WHERE l.queue = lane.queue AND l.priority = lane.priority);
    -- Every key with available jobs of a fair queue: a loose index scan of jobs_key_claim_idx.
    INSERT INTO skiplock.key_lanes (queue, limit_key)
    WITH RECURSIVE k AS (
        SELECT c.queue, (SELECT j.limit_key FROM skiplock.jobs j
                         WHERE j.state = 'available' AND j.queue = c.queue AND j.limit_key > ''
                         ORDER BY j.limit_key LIMIT 1) AS key
        FROM skiplock.queues c WHERE c.fair
        UNION ALL
        SELECT k.queue, (SELECT j.limit_key FROM skiplock.jobs j
                         WHERE j.state = 'available' AND j.queue = k.queue AND j.limit_key > k.key
                         ORDER BY j.limit_key LIMIT 1)
        FROM k WHERE k.key IS NOT NULL
    )
    SELECT k.queue, k.key FROM k
    WHERE k.key IS NOT NULL
      AND NOT EXISTS (SELECT 1 FROM skiplock.key_lanes l WHERE l.queue = k.queue AND l.limit_key = k.key);
    -- Rows to change: a lane's rows beyond the first (awake first, then the earliest), an
    -- awake lane with no job due, a sleeping one with no job at all.
    UPDATE skiplock.lanes l SET pending = true
    WHERE l.ctid = ANY (ARRAY(
        SELECT r.t FROM (
            SELECT l.ctid AS t, l.queue, l.priority, l.due_at,
                   row_number() OVER (PARTITION BY l.queue, l.priority ORDER BY l.due_at NULLS FIRST) AS rn
            FROM skiplock.lanes l WHERE NOT l.pending) r
        WHERE r.rn > 1
           OR NOT EXISTS (SELECT 1 FROM skiplock.jobs j
                          WHERE j.state = 'available' AND j.queue = r.queue AND j.priority = r.priority
                            AND (r.due_at IS NOT NULL OR j.scheduled_at <= now()))));
    GET DIAGNOSTICS n = ROW_COUNT;
    UPDATE skiplock.key_lanes l SET pending = true
    WHERE l.ctid = ANY (ARRAY(
        SELECT r.t FROM (
            SELECT l.ctid AS t, l.queue, l.limit_key, l.due_at,
                   row_number() OVER (PARTITION BY l.queue, l.limit_key ORDER BY l.due_at NULLS FIRST) AS rn
            FROM skiplock.key_lanes l WHERE NOT l.pending) r
        WHERE r.rn > 1
           OR NOT EXISTS (SELECT 1 FROM skiplock.queues c WHERE c.queue = r.queue AND c.fair)
           OR NOT EXISTS (SELECT 1 FROM skiplock.jobs j
                          WHERE j.state = 'available' AND j.queue = r.queue AND j.limit_key = r.limit_key
                            AND (r.due_at IS NOT NULL OR j.scheduled_at <= now()))));
    GET DIAGNOSTICS m = ROW_COUNT;
    RETURN n + m;
END;
$$;

-- The rows pending now (as text, skiplock._lanes_settle takes them back) and the
-- transactions writing jobs right now, other than this one (their virtual transaction ids:
-- each holds a lock on its own until it ends, skiplock._lanes_writers_left).
CREATE OR REPLACE FUNCTION skiplock._lanes_marked(OUT lane_rows text[], OUT key_rows text[],
                                                  OUT writers text[])
LANGUAGE sql STABLE AS $$
    SELECT ARRAY(SELECT l.ctid::text FROM skiplock.lanes l WHERE l.pending),
           ARRAY(SELECT l.ctid::text FROM skiplock.key_lanes l WHERE l.pending),
           ARRAY(SELECT DISTINCT k.virtualtransaction FROM pg_catalog.pg_locks k
                 WHERE k.locktype = 'relation' AND k.relation = 'skiplock.jobs'::regclass
                   AND k.database = (SELECT d.oid FROM pg_catalog.pg_database d
                                     WHERE d.datname = pg_catalog.current_database())
                   AND k.mode = 'RowExclusiveLock' AND k.granted AND k.pid <> pg_catalog.pg_backend_pid())
$$;

-- How many of `writers` (virtual transaction ids) are still running.
CREATE OR REPLACE FUNCTION skiplock._lanes_writers_left(writers text[]) RETURNS integer
LANGUAGE sql STABLE AS $$
    SELECT count(DISTINCT k.virtualxid)::integer FROM pg_catalog.pg_locks k
    WHERE k.locktype = 'virtualxid' AND k.virtualxid = ANY (writers)
$$;

-- Step 3 (above) for the rows `lane_rows` and `key_rows` listed by skiplock._lanes_marked
-- once their writers had ended: each still pending is removed, or kept awake or asleep until
-- its lane's earliest available job. Returns how many rows it removed.
CREATE OR REPLACE FUNCTION skiplock._lanes_settle(lane_rows text[], key_rows text[]) RETURNS bigint
SET enable_seqscan = off
LANGUAGE plpgsql AS $$
DECLARE
    r record;
    first_at timestamptz;
    removed bigint := 0;
BEGIN
    FOR r IN SELECT l.ctid AS t, l.queue, l.priority FROM skiplock.lanes l
             WHERE l.ctid = ANY (lane_rows::tid[]) AND l.pending
    LOOP
        SELECT j.scheduled_at INTO first_at FROM skiplock.jobs j
        WHERE j.state = 'available' AND j.queue = r.queue AND j.priority = r.priority
        ORDER BY j.scheduled_at LIMIT 1;
        IF first_at IS NULL OR EXISTS (
               SELECT 1 FROM skiplock.lanes o
               WHERE o.queue = r.queue AND o.priority = r.priority AND NOT o.pending
                 AND (o.due_at IS NULL OR o.due_at <= greatest(first_at, now()))) THEN
            DELETE FROM skiplock.lanes l WHERE l.ctid = r.t;
            removed := removed + 1;
        ELSE
            UPDATE skiplock.lanes l
            SET pending = false, due_at = CASE WHEN first_at <= now() THEN NULL ELSE skiplock._time_clamp(first_at) END
            WHERE l.ctid = r.t;
        END IF;
    END LOOP;
    FOR r IN SELECT l.ctid AS t, l.queue, l.limit_key FROM skiplock.key_lanes l
             WHERE l.ctid = ANY (key_rows::tid[]) AND l.pending
    LOOP
        SELECT min(j.scheduled_at) INTO first_at FROM skiplock.jobs j
        WHERE j.state = 'available' AND j.queue = r.queue AND j.limit_key = r.limit_key;
        IF first_at IS NULL
           OR NOT EXISTS (SELECT 1 FROM skiplock.queues c WHERE c.queue = r.queue AND c.fair)
           OR EXISTS (SELECT 1 FROM skiplock.key_lanes o
                      WHERE o.queue = r.queue AND o.limit_key = r.limit_key AND NOT o.pending
                        AND (o.due_at IS NULL OR o.due_at <= greatest(first_at, now()))) THEN
            DELETE FROM skiplock.key_lanes l WHERE l.ctid = r.t;
            removed := removed + 1;
        ELSE
            UPDATE skiplock.key_lanes l
            SET pending = false, due_at = CASE WHEN first_at <= now() THEN NULL ELSE skiplock._time_clamp(first_at) END
            WHERE l.ctid = r.t;
        END IF;
    END LOOP;
    RETURN removed;
END;
$$;
