-- The filter form's choices: kinds and queues of the running jobs and of the newest 10,000
-- jobs. Both reads are bounded (the partial index of running rows, the primary key
-- backwards), never a scan of a backlog or of the finished rows.
WITH recent AS (
    SELECT kind, queue FROM skiplock.jobs ORDER BY id DESC LIMIT 10000
), running AS (
    SELECT kind, queue FROM skiplock.jobs WHERE state = 'running'
), both_ AS (
    SELECT * FROM recent UNION ALL SELECT * FROM running
)
SELECT DISTINCT x.name, x.what
FROM (SELECT kind AS name, 'kind' AS what FROM both_
      UNION ALL
      SELECT queue, 'queue' FROM both_) x
ORDER BY x.what, x.name
LIMIT 1000
