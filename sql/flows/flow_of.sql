-- The flow job $1 belongs to: the recorded flow (skiplock.flow_jobs) if any, else, for a job
-- with dependencies or dependents, the job itself (skiplock.flow_members reads its dependents).
SELECT coalesce(
    (SELECT f.flow_id FROM skiplock.flow_jobs f WHERE f.job_id = $1 ORDER BY f.flow_id LIMIT 1),
    (SELECT $1 WHERE EXISTS (SELECT 1 FROM skiplock.job_dependencies d
                             WHERE d.job_id = $1 OR d.depends_on = $1)))
