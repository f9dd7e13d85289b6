-- Overview: per queue, jobs by state (waiting: for dependencies, docs/flows.md), how many
-- available jobs wait for a later time, and
-- the age of the oldest job that is due and waiting (seconds, on the database clock), with
-- the queue's control settings (skiplock.queues: paused, limits; a paused or limited queue
-- without jobs is listed too) and its admission limit (skiplock.queue_admission: at most so
-- many available jobs). One pass over the jobs table: with a million finished rows
-- this is the overview's cost.
--
-- Bounded ($1 = SKIPLOCK_TOP_QUEUES, docs/console.md "Many queues"): the queues are ranked
-- paused first (their Resume button stays at hand), then by live jobs (waiting, available,
-- scheduled, running; most first), then by name; the first $1 come one row each, ordered
-- by name, and the rest are added up in one last row whose queue is NULL (`queues`: how
-- many it adds up). 100,000 queue names make a page of $1 + 1 lines.
WITH s AS (
    SELECT queue,
           count(*) FILTER (WHERE state = 'waiting') AS waiting,
           count(*) FILTER (WHERE state = 'available' AND scheduled_at <= now()) AS available,
           count(*) FILTER (WHERE state = 'available' AND scheduled_at > now()) AS scheduled,
           count(*) FILTER (WHERE state = 'running') AS running,
           count(*) FILTER (WHERE state = 'completed') AS completed,
           count(*) FILTER (WHERE state = 'discarded') AS discarded,
           count(*) FILTER (WHERE state = 'cancelled') AS cancelled,
           min(scheduled_at) FILTER (WHERE state = 'available' AND scheduled_at <= now())
               AS oldest_due
    FROM skiplock.jobs
    GROUP BY queue
), per_queue AS (
    SELECT coalesce(s.queue, c.queue) AS queue,
           coalesce(s.waiting, 0) AS waiting,
           coalesce(s.available, 0) AS available,
           coalesce(s.scheduled, 0) AS scheduled,
           coalesce(s.running, 0) AS running,
           coalesce(s.completed, 0) AS completed,
           coalesce(s.discarded, 0) AS discarded,
           coalesce(s.cancelled, 0) AS cancelled,
           s.oldest_due,
           coalesce(c.paused, false) AS paused,
           c.concurrency, c.key_concurrency, c.key_rate,
           extract(epoch FROM c.key_period)::float8 AS key_period_secs,
           a.max_waiting
    FROM s
    FULL JOIN skiplock.queues c ON c.queue = s.queue
    LEFT JOIN skiplock.queue_admission a ON a.queue = coalesce(s.queue, c.queue)
), ranked AS (
    SELECT *, row_number() OVER (ORDER BY paused DESC, waiting + available + scheduled + running DESC, queue)
               AS rank
    FROM per_queue
)
SELECT queue, waiting, available, scheduled, running, completed, discarded, cancelled,
       extract(epoch FROM now() - oldest_due)::float8 AS oldest_wait_secs,
       paused, concurrency, key_concurrency, key_rate, key_period_secs, max_waiting,
       1::int8 AS queues
FROM ranked
WHERE rank <= $1
UNION ALL
SELECT NULL, sum(waiting)::int8, sum(available)::int8, sum(scheduled)::int8, sum(running)::int8,
       sum(completed)::int8, sum(discarded)::int8, sum(cancelled)::int8,
       extract(epoch FROM now() - min(oldest_due))::float8,
       bool_or(paused), NULL, NULL, NULL, NULL, NULL,
       count(*)
FROM ranked
WHERE rank > $1
HAVING count(*) > 0
ORDER BY queue NULLS LAST
