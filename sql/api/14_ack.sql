-- skiplock core SQL API: the ack and the heartbeat of running jobs (skiplock._ack, skiplock._heartbeat).
-- Installed (CREATE OR REPLACE) by `skiplock migrate` after the schema migrations, in the order of
-- src/store/schema.rs (api_files).

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
