-- Overview: per queue, jobs by state, how many available jobs wait for a later time, and
-- the age of the oldest job that is due and waiting (seconds, on the database clock), with
-- the queue's control settings (skiplock.queues: paused, limits; a paused or limited queue
-- without jobs is listed too). One pass over the jobs table: with a million finished rows
-- this is the overview's cost.
SELECT coalesce(s.queue, c.queue) AS queue,
       coalesce(s.available, 0) AS available,
       coalesce(s.scheduled, 0) AS scheduled,
       coalesce(s.running, 0) AS running,
       coalesce(s.completed, 0) AS completed,
       coalesce(s.discarded, 0) AS discarded,
       coalesce(s.cancelled, 0) AS cancelled,
       s.oldest_wait_secs,
       coalesce(c.paused, false) AS paused,
       c.concurrency, c.key_concurrency, c.key_rate,
       extract(epoch FROM c.key_period)::float8 AS key_period_secs
FROM (SELECT queue,
             count(*) FILTER (WHERE state = 'available' AND scheduled_at <= now()) AS available,
             count(*) FILTER (WHERE state = 'available' AND scheduled_at > now()) AS scheduled,
             count(*) FILTER (WHERE state = 'running') AS running,
             count(*) FILTER (WHERE state = 'completed') AS completed,
             count(*) FILTER (WHERE state = 'discarded') AS discarded,
             count(*) FILTER (WHERE state = 'cancelled') AS cancelled,
             extract(epoch FROM now() - min(scheduled_at) FILTER (WHERE state = 'available' AND scheduled_at <= now()))::float8
                 AS oldest_wait_secs
      FROM skiplock.jobs
      GROUP BY queue) s
FULL JOIN skiplock.queues c ON c.queue = s.queue
ORDER BY 1
