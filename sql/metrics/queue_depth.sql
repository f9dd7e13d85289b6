-- /metrics: per queue, the jobs waiting now, waiting for a later time, and running, and the
-- age of the oldest job that is due and waiting (seconds, on the database clock). Only the
-- live states are read (the claim and running indexes), never the finished rows, so a
-- scrape stays cheap with millions of completed jobs. A queue with no live job has no row.
SELECT queue,
       count(*) FILTER (WHERE state = 'available' AND scheduled_at <= now()) AS available,
       count(*) FILTER (WHERE state = 'available' AND scheduled_at > now()) AS scheduled,
       count(*) FILTER (WHERE state = 'running') AS running,
       coalesce(extract(epoch FROM now() - min(scheduled_at)
                FILTER (WHERE state = 'available' AND scheduled_at <= now()))::float8, 0)
           AS oldest_wait_seconds
FROM skiplock.jobs
WHERE state IN ('available', 'running')
GROUP BY queue
ORDER BY queue
