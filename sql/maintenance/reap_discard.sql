-- Discard the jobs the reaper judged abandoned (still locked by its transaction), each with
-- the reason in its errors ($2: the maximum age, as the settings write it), so nothing goes
-- without a trace: the row, its args and its history stay until retention deletes discarded
-- rows (SKIPLOCK_RETAIN_FAILED). A running job's worker, if it still lives, finds its attempt
-- gone (its ack is fenced on `running`, sql/queue/ack_many.sql).
UPDATE skiplock.jobs j
SET state = 'discarded',
    finalized_at = now(),
    errors = j.errors || jsonb_build_array(jsonb_build_object(
        'attempt', j.attempt, 'at', now(),
        'error', CASE WHEN j.state = 'running'
                      THEN format('reaped: attempt %s running since %s (worker %s), longer than the reaper''s maximum age %s',
                                  j.attempt, j.attempted_at, coalesce(j.attempted_by, '-'), $2::text)
                      ELSE format('reaped: due since %s and unclaimed for longer than the reaper''s maximum age %s, although nothing held it (queue not paused or limited, a live worker handling its kind)',
                                  coalesce(j.scheduled_at, j.created_at), $2::text)
                 END))
WHERE j.id = ANY($1) AND j.state IN ('available', 'running')
