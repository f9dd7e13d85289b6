-- Delete at most $3 jobs in state $1 finalized more than $2 seconds ago, oldest first.
-- Small batches keep each statement's locks short so the claim path is never held up.
-- A job an unfinished job depends on is kept (its dependent reads its result:
-- skiplock.dependency_results), but for one more retention period at most: any enqueuer may
-- make a job depend on any other, and a dependent that never runs (due in 9999, or in a queue
-- nobody serves, with on_dependency_failure 'run') held another's finished job and its args
-- for good (docs/security.md, "Flows between tenants"). An edge not yet settled keeps its job
-- whatever its age: deleting it would leave the dependent waiting for good, and the settling
-- comes soon (the ack's slices, the maintenance's sweep). A deleted job's flow rows go with it,
-- and so do its steps and signals (docs/steps.md).
-- Returns how many.
WITH doomed AS (
    SELECT id
    FROM skiplock.jobs j
    WHERE state = $1
      AND finalized_at < now() - make_interval(secs => $2)
      AND NOT EXISTS (SELECT 1 FROM skiplock.job_dependencies d
                      JOIN skiplock.jobs w ON w.id = d.job_id
                      WHERE d.depends_on = j.id
                        AND (d.resolved IS NULL
                             OR (w.state IN ('waiting', 'available', 'running')
                                 AND j.finalized_at >= now() - make_interval(secs => 2 * $2))))
    ORDER BY finalized_at
    LIMIT $3
    FOR UPDATE SKIP LOCKED
), gone AS (
    DELETE FROM skiplock.jobs j USING doomed d WHERE j.id = d.id RETURNING j.id
), edges AS (
    DELETE FROM skiplock.job_dependencies x USING gone g WHERE x.job_id = g.id OR x.depends_on = g.id
), waits AS (
    DELETE FROM skiplock.job_waits x USING gone g WHERE x.job_id = g.id
), members AS (
    DELETE FROM skiplock.flow_jobs x USING gone g WHERE x.job_id = g.id
), watches AS (
    DELETE FROM skiplock.job_watches x USING gone g WHERE x.job_id = g.id
), steps AS (
    DELETE FROM skiplock.job_steps x USING gone g WHERE x.job_id = g.id
), signals AS (
    DELETE FROM skiplock.job_signals x USING gone g WHERE x.job_id = g.id
)
SELECT count(*) FROM gone
