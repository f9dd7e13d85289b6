-- The verdict of a chaos run. An execution that is not the last of its job means the job ran
-- again. That is expected (at-least-once) only if the process that ran it was SIGKILLed
-- after that execution and before the job ran again (the kill is why the attempt never
-- finished; a kill long after the re-run explains nothing), or if the handler itself reported an error for that attempt (e.g. its
-- connection died in a Postgres restart after its insert had committed: the queue must retry
-- a failed handler). A rescue of a live worker's job is NOT an explanation.
-- Lost: a job not completed, or completed without any recorded execution.
WITH ex0 AS (
    SELECT e.*,
           row_number() OVER (PARTITION BY e.job_id ORDER BY e.at DESC, e.id DESC) AS from_last,
           count(*) OVER (PARTITION BY e.job_id) AS runs,
           lead(e.at) OVER (PARTITION BY e.job_id ORDER BY e.at, e.id) AS next_at
    FROM skiplock_chaos.executions e
), ex AS (
    SELECT ex0.*,
           -- A statement the process sent just before it died still runs after the kill
           -- (the server reads it from the socket): allow a few seconds.
           EXISTS (SELECT 1 FROM skiplock_chaos.kills k
                   WHERE k.pid = ex0.pid AND ex0.at <= k.at + interval '5 seconds'
                     AND (ex0.next_at IS NULL OR k.at <= ex0.next_at)) AS killed,
           EXISTS (SELECT 1 FROM skiplock.jobs j, jsonb_array_elements(j.errors) AS x(err)
                   WHERE j.id = ex0.job_id AND (x.err->>'attempt')::int = ex0.attempt
                     AND x.err->>'error' NOT LIKE 'rescued:%') AS handler_failed
    FROM ex0
)
SELECT
    (SELECT count(*) FROM skiplock.jobs WHERE kind = 'chaos_record') AS jobs,
    (SELECT count(*) FROM skiplock.jobs WHERE kind = 'chaos_record' AND state = 'completed') AS completed,
    (SELECT count(*) FROM ex) AS executions,
    (SELECT count(DISTINCT job_id) FROM ex WHERE runs > 1) AS duplicates,
    (SELECT count(*) FROM ex WHERE from_last > 1 AND NOT killed AND handler_failed)
        AS retried_after_error,
    (SELECT count(*) FROM ex WHERE from_last > 1 AND NOT killed AND NOT handler_failed)
        AS unexplained,
    (SELECT coalesce(array_agg(DISTINCT job_id), '{}') FROM ex
     WHERE from_last > 1 AND NOT killed AND NOT handler_failed)
        AS unexplained_jobs,
    (SELECT count(*) FROM skiplock.jobs j
     WHERE j.kind = 'chaos_record'
       AND (j.state <> 'completed'
            OR NOT EXISTS (SELECT 1 FROM skiplock_chaos.executions e WHERE e.job_id = j.id)))
        AS lost
