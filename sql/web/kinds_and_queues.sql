-- The filter form's choices: kinds and queues that have available or running jobs, plus
-- those of the last 10,000 jobs (bounded: never a scan of every finished row).
SELECT DISTINCT x.name, x.what
FROM (
    SELECT kind AS name, 'kind' AS what FROM skiplock.jobs WHERE state IN ('available', 'running')
    UNION
    SELECT queue, 'queue' FROM skiplock.jobs WHERE state IN ('available', 'running')
    UNION
    SELECT r.kind, 'kind' FROM (SELECT kind FROM skiplock.jobs ORDER BY id DESC LIMIT 10000) r
    UNION
    SELECT r.queue, 'queue' FROM (SELECT queue FROM skiplock.jobs ORDER BY id DESC LIMIT 10000) r
) x
ORDER BY x.what, x.name
LIMIT 1000
