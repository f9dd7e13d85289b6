-- Write many outcomes in one statement. Fenced: a row changes only while it is still running
-- the attempt that produced the outcome, so a late ack from a rescued job never overwrites a
-- newer attempt. Returns the ids that were written.
--
-- A job leaving `running` frees a slot of its queue's concurrency limits: for a queue with
-- a concurrency limit (queue or per key) the statement sends NOTIFY skiplock_wake '<queue>'
-- (delivered at commit, once per queue and transaction), so a producer held back by the
-- limit in another process claims again at once, not at its next poll. For other queues it
-- costs one probe of skiplock.queues' primary key per distinct queue of the batch, in this
-- same statement.
WITH acked AS (
UPDATE skiplock.jobs j
SET state = a.state,
    finalized_at = CASE WHEN a.state IN ('completed', 'discarded', 'cancelled') THEN now() END,
    scheduled_at = coalesce(a.scheduled_at, j.scheduled_at),
    attempt = CASE WHEN a.give_back THEN j.attempt - 1 ELSE j.attempt END,
    errors = CASE WHEN a.error IS NULL THEN j.errors
                  ELSE j.errors || jsonb_build_array(jsonb_build_object(
                      'attempt', j.attempt, 'at', now(), 'error', a.error)) END,
    result = coalesce(a.result, j.result),
    heartbeat_at = NULL
FROM unnest($1::bigint[], $2::integer[], $3::skiplock.job_state[], $4::timestamptz[], $5::boolean[],
            $6::text[], $7::jsonb[])
     AS a(id, attempt, state, scheduled_at, give_back, error, result)
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
    SELECT pg_notify('skiplock_wake', q.queue)
    FROM (SELECT DISTINCT acked.queue FROM acked) q
    WHERE EXISTS (SELECT 1 FROM skiplock.queues c
                  WHERE c.queue = q.queue
                    AND (c.concurrency IS NOT NULL OR c.key_concurrency IS NOT NULL))
)
-- The uncorrelated sub-select runs once (an InitPlan), so the notifications are sent.
SELECT acked.id FROM acked WHERE (SELECT count(*) FROM woken) >= 0
