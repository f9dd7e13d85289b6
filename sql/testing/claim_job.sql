-- Claims job $1 for an inline run by $2 (skiplock::testing::run_recorded, replay_job), as the
-- claim (skiplock._claim) claims a job, whatever its run time: running, one more attempt,
-- started now. Only an available job; no row otherwise.
UPDATE skiplock.jobs j
SET state = 'running',
    attempt = least(j.attempt, 2147483646) + 1,
    attempted_at = now(),
    attempted_by = $2,
    heartbeat_at = now()
WHERE j.id = $1 AND j.state = 'available'
RETURNING j.id, j.kind, j.queue, j.args::text AS args, j.attempt, j.max_attempts, j.scheduled_at,
          j.created_at, j.tags, j.meta
