-- /metrics: per queue, the jobs waiting now, waiting for a later time, and running, the age
-- of the oldest job that is due and waiting (seconds, on the database clock), and whether
-- it is paused. Only the live states are read (the claim and running indexes), never the
-- finished rows, so a scrape stays cheap with millions of completed jobs; queues with
-- control settings (skiplock.queues) but no live job are listed with zeros.
--
-- Bounded ($1 = SKIPLOCK_TOP_QUEUES, docs/console.md "Many queues"): the queues are ranked
-- paused first, then by live jobs (most first), then by name; the first $1 come one row
-- each, ordered by name, and the rest are added up in one last row whose queue is NULL
-- (`queues`: how many it adds up, `paused_queues`: how many of them are paused). Any number
-- of queue names costs the scrape $1 + 1 rows.
WITH live AS (
    SELECT queue,
           count(*) FILTER (WHERE state = 'available' AND scheduled_at <= now()) AS available,
           count(*) FILTER (WHERE state = 'available' AND scheduled_at > now()) AS scheduled,
           count(*) FILTER (WHERE state = 'running') AS running,
           min(scheduled_at) FILTER (WHERE state = 'available' AND scheduled_at <= now())
               AS oldest_due
    FROM skiplock.jobs
    WHERE state IN ('available', 'running')
    GROUP BY queue
), per_queue AS (
    SELECT coalesce(l.queue, c.queue) AS queue,
           coalesce(l.available, 0) AS available,
           coalesce(l.scheduled, 0) AS scheduled,
           coalesce(l.running, 0) AS running,
           l.oldest_due,
           coalesce(c.paused, false) AS paused
    FROM live l
    FULL JOIN skiplock.queues c ON c.queue = l.queue
), ranked AS (
    SELECT *, row_number() OVER (ORDER BY paused DESC, available + scheduled + running DESC, queue)
               AS rank
    FROM per_queue
)
SELECT queue, available, scheduled, running,
       coalesce(extract(epoch FROM now() - oldest_due)::float8, 0) AS oldest_wait_seconds,
       paused, 1::int8 AS queues, paused::int::int8 AS paused_queues
FROM ranked
WHERE rank <= $1
UNION ALL
SELECT NULL, sum(available)::int8, sum(scheduled)::int8, sum(running)::int8,
       coalesce(extract(epoch FROM now() - min(oldest_due))::float8, 0),
       bool_or(paused), count(*), count(*) FILTER (WHERE paused)
FROM ranked
WHERE rank > $1
HAVING count(*) > 0
ORDER BY queue NULLS LAST
