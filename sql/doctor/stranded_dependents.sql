-- Jobs left `waiting` although every dependency has finished (completed, discarded, cancelled,
-- or deleted by retention) and none finished within the last $1 seconds: an ack settles its
-- dependents at once and the maintenance's sweep (skiplock.settle_dependencies, run by every
-- worker's rescuer) the rest, so one still waiting means no sweep runs or it fails. Read
-- through skiplock.job_waits (one row per job with dependencies), no scan of the jobs table.
-- At most $2, oldest first.
SELECT j.id, j.kind, j.queue,
       count(d.depends_on) AS dependencies,
       extract(epoch FROM now() - j.created_at)::float8 AS waiting_seconds,
       extract(epoch FROM now() - max(p.finalized_at))::float8 AS last_finished_seconds
FROM skiplock.job_waits w
JOIN skiplock.jobs j ON j.id = w.job_id AND j.state = 'waiting'
JOIN skiplock.job_dependencies d ON d.job_id = j.id
LEFT JOIN skiplock.jobs p ON p.id = d.depends_on
GROUP BY j.id, j.kind, j.queue, j.created_at
HAVING bool_and(p.id IS NULL OR p.state IN ('completed', 'discarded', 'cancelled'))
   AND coalesce(max(p.finalized_at), '-infinity') < now() - make_interval(secs => $1)
ORDER BY j.id
LIMIT $2
