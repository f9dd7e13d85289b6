-- Periodic jobs as declared by workers, with their latest run, that job's state, and the
-- latest failed enqueue (cleared by the next successful one).
SELECT p.name, p.schedule, p.kind, p.queue, p.args, p.declared_by, p.declared_at,
       r.period_start AS last_period, r.job_id AS last_job_id, j.state AS last_job_state,
       p.last_error, p.last_error_at
FROM skiplock.periodic_jobs p
LEFT JOIN LATERAL (
    SELECT pr.period_start, pr.job_id FROM skiplock.periodic_runs pr
    WHERE pr.name = p.name ORDER BY pr.period_start DESC LIMIT 1
) r ON true
LEFT JOIN skiplock.jobs j ON j.id = r.job_id
ORDER BY p.name
