-- Write many outcomes in one statement. Fenced: a row changes only while it is still running
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
WITH keyed AS MATERIALIZED (
    SELECT h.id, h.holder
    FROM (SELECT array_agg(j.id) AS ids, array_agg(j.unique_key) AS keys
          FROM unnest($1::bigint[], $2::integer[], $3::skiplock.job_state[]) AS r(id, attempt, state)
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
    scheduled_at = CASE WHEN a.state = 'available'
                        THEN greatest(coalesce(a.scheduled_at, j.scheduled_at), now())
                        ELSE coalesce(a.scheduled_at, j.scheduled_at) END,
    attempt = CASE WHEN a.give_back THEN j.attempt - 1 ELSE j.attempt END,
    errors = CASE WHEN a.error IS NULL AND a.holder IS NULL THEN j.errors
                  ELSE j.errors
                       || CASE WHEN a.error IS NULL THEN '[]'::jsonb
                               ELSE jsonb_build_array(jsonb_build_object(
                                   'attempt', j.attempt, 'at', now(), 'error', a.error)) END
                       || skiplock._superseded_entry(j.attempt, a.holder, j.unique_key) END,
    result = coalesce(a.result, j.result),
    heartbeat_at = NULL
FROM (SELECT a.*,
             -- One map for the statement, built at the first ack going back (the sub-select is
             -- uncorrelated: it runs once, and never for a batch without one); a batch may
             -- name a job twice (a release at shutdown and the handler's own late ack).
             CASE WHEN a.state = 'available'
                  THEN ((SELECT jsonb_object_agg(k.id, k.holder) FROM keyed k) ->> a.id::text)::bigint
             END AS holder
      FROM unnest($1::bigint[], $2::integer[], $3::skiplock.job_state[], $4::timestamptz[],
                  $5::boolean[], $6::text[], $7::jsonb[])
           AS a(id, attempt, state, scheduled_at, give_back, error, result)
      OFFSET 0) a -- kept a subquery, so `holder` is looked up once per row, not once per use
WHERE j.id = a.id
  -- Compared as text on purpose: `state = 'running'` would let the planner drive the join
  -- from the partial index of running rows (estimated near-empty by stale statistics) and
  -- rescan the array for every row, quadratic in the batch. This way the plan is always
  -- array -> primary key, and rows are locked in array order (callers sort by id, so the
  -- heartbeat and ack statements never deadlock each other).
  AND j.state::text = 'running'
  AND j.attempt = a.attempt
RETURNING j.id, j.queue
),
woken AS (
    SELECT pg_notify(skiplock._wake_channel(), q.queue)
    FROM (SELECT DISTINCT acked.queue FROM acked) q
    WHERE EXISTS (SELECT 1 FROM skiplock.queues c
                  WHERE c.queue = q.queue
                    AND (c.concurrency IS NOT NULL OR c.key_concurrency IS NOT NULL))
)
-- The uncorrelated sub-select runs once (an InitPlan), so the notifications are sent.
SELECT acked.id FROM acked WHERE (SELECT count(*) FROM woken) >= 0
