-- Jobs worker $1 claimed (from queue $2, or any queue when NULL) but does not hold (ids not
-- in $3): a producer failed between its claim and starting them, or the worker is stopping.
-- They go back to `available` at once with reason $5 in `errors`. The attempt is given back
-- unless $4: then the failure involved this job alone and may be its fault, so the attempt
-- counts (and a job out of attempts is discarded), which keeps a poison row from looping.
-- Each queue that got jobs back is woken (a NOTIFY '<queue>' on skiplock._wake_channel(), once per queue, at
-- commit), so other workers claim them at once, not at their next poll.
WITH mine AS (
    SELECT j.id, j.unique_key, NOT ($4 AND j.attempt >= j.max_attempts) AS back
    FROM skiplock.jobs j
    WHERE j.state = 'running'
      AND j.attempted_by = $1
      AND ($2::text IS NULL OR j.queue = $2)
      AND j.id <> ALL($3::bigint[])
),
-- A keyed job going back while another available job holds its unique_key is cancelled
-- instead, superseded by it (skiplock._superseded_by; sql/queue/ack_many.sql says why this is
-- not a trigger).
held AS (
    SELECT h.id, h.holder
    FROM (SELECT array_agg(m.id) AS ids, array_agg(m.unique_key) AS keys,
                 array_agg(m.back) AS back
          FROM mine m) k,
         skiplock._superseded_by(k.ids, k.keys, k.back) h
),
released AS (
UPDATE skiplock.jobs j
SET state = CASE WHEN $4 AND j.attempt >= j.max_attempts THEN 'discarded'
                 WHEN h.holder IS NOT NULL THEN 'cancelled'
                 ELSE 'available' END::skiplock.job_state,
    finalized_at = CASE WHEN ($4 AND j.attempt >= j.max_attempts) OR h.holder IS NOT NULL THEN now() END,
    attempt = CASE WHEN $4 THEN j.attempt ELSE j.attempt - 1 END,
    scheduled_at = now(),
    heartbeat_at = NULL,
    errors = j.errors || jsonb_build_array(jsonb_build_object(
        'attempt', j.attempt, 'at', now(), 'error', $5::text))
        || skiplock._superseded_entry(j.attempt, h.holder, j.unique_key)
FROM held h
WHERE j.id = h.id
  -- Still this worker's running job when the update locks it (the selection above is the
  -- statement's snapshot; locking it there too would write a second lock per row).
  AND j.state = 'running'
  AND j.attempted_by = $1
RETURNING j.id, j.state, j.queue, j.priority, j.limit_key, j.scheduled_at
),
woken AS (
    SELECT pg_notify(skiplock._wake_channel(), q.queue) FROM (SELECT DISTINCT released.queue FROM released) q
),
-- Their lanes, which may have gone to sleep or away meanwhile (skiplock._lanes_need).
laned AS (
    SELECT skiplock._lanes_need(array_agg(r.queue), array_agg(r.priority), array_agg(r.limit_key),
                                array_agg(r.scheduled_at))
    FROM released r WHERE r.state = 'available'
)
-- The uncorrelated sub-selects run once (InitPlans), so the notifications are sent.
SELECT released.id, released.state FROM released
WHERE (SELECT count(*) FROM woken) + (SELECT count(*) FROM laned) >= 0
