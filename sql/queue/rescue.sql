-- Return running jobs whose heartbeat is older than $1 seconds to available, or discard them
-- when they are out of attempts; $2 rows at most per statement.
-- Nothing is rescued until the server itself has been up for a whole window: after a
-- restart every heartbeat is stale only because nobody could write one (the workers write
-- theirs as soon as they reconnect). The rescuer's process adds its own, wider guard
-- (src/worker/rescuer.rs) for outages that were not restarts.
WITH stale AS (
    SELECT id, unique_key, attempt < max_attempts AS back
    FROM skiplock.jobs
    WHERE state = 'running'
      AND pg_postmaster_start_time() < now() - make_interval(secs => $1)
      AND coalesce(heartbeat_at, attempted_at, created_at) < now() - make_interval(secs => $1)
    ORDER BY heartbeat_at
    LIMIT $2
    FOR NO KEY UPDATE SKIP LOCKED
),
-- A keyed job going back while another available job holds its unique_key is cancelled
-- instead, superseded by it (skiplock._superseded_by; sql/queue/ack_many.sql says why this is
-- not a trigger).
held AS (
    SELECT h.id, h.holder
    FROM (SELECT array_agg(s.id) AS ids, array_agg(s.unique_key) AS keys,
                 array_agg(s.back) AS back
          FROM stale s) k,
         skiplock._superseded_by(k.ids, k.keys, k.back) h
),
-- Each queue that got jobs back is woken (a NOTIFY '<queue>' on skiplock._wake_channel(), once per queue,
-- at commit): an idle producer claims them at once instead of at its next poll, and one held
-- back by a concurrency limit gets the slot the dead attempt held.
rescued AS (
UPDATE skiplock.jobs j
SET state = CASE WHEN j.attempt >= j.max_attempts THEN 'discarded'
                 WHEN h.holder IS NOT NULL THEN 'cancelled'
                 ELSE 'available' END::skiplock.job_state,
    finalized_at = CASE WHEN j.attempt >= j.max_attempts OR h.holder IS NOT NULL THEN now() END,
    scheduled_at = now(),
    heartbeat_at = NULL,
    -- Its worker may still be running this attempt and ack it (fenced off as long as no
    -- later claim reuses the number: a replace keeps counting from here, skiplock._enqueue).
    taken_attempt = j.attempt,
    errors = j.errors || jsonb_build_array(jsonb_build_object(
        'attempt', j.attempt, 'at', now(),
        'error', format('rescued: worker %s sent no heartbeat since %s', j.attempted_by, j.heartbeat_at)))
        || skiplock._superseded_entry(j.attempt, h.holder, j.unique_key)
FROM held h
WHERE j.id = h.id
RETURNING j.id, j.kind, j.state, j.queue, j.priority, j.limit_key, j.scheduled_at
),
woken AS (
    SELECT pg_notify(skiplock._wake_channel(), q.queue) FROM (SELECT DISTINCT rescued.queue FROM rescued) q
),
-- Their lanes, which may have gone to sleep or away while they ran (skiplock._lanes_need).
laned AS (
    SELECT skiplock._lanes_need(array_agg(r.queue), array_agg(r.priority), array_agg(r.limit_key),
                                array_agg(r.scheduled_at))
    FROM rescued r WHERE r.state = 'available'
)
-- The uncorrelated sub-selects run once (InitPlans), so the notifications are sent.
SELECT rescued.id, rescued.kind, rescued.state FROM rescued
WHERE (SELECT count(*) FROM woken) + (SELECT count(*) FROM laned) >= 0
