-- The executions and errors of the jobs in $1, for the post-mortem of a failed chaos run.
SELECT e.job_id, e.attempt, e.pid, e.worker_id, e.at::text AS at, j.errors::text AS errors
FROM skiplock_chaos.executions e JOIN skiplock.jobs j ON j.id = e.job_id
WHERE e.job_id = ANY($1)
ORDER BY e.job_id, e.at
