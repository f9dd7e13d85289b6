-- Overview: per queue, jobs by state, how many available jobs wait for a later time, and
-- the age of the oldest job that is due and waiting (seconds, on the database clock).
-- One pass over the table: with a million finished rows this is the overview's cost.
SELECT queue,
       count(*) FILTER (WHERE state = 'available' AND scheduled_at <= now()) AS available,
       count(*) FILTER (WHERE state = 'available' AND scheduled_at > now()) AS scheduled,
       count(*) FILTER (WHERE state = 'running') AS running,
       count(*) FILTER (WHERE state = 'completed') AS completed,
       count(*) FILTER (WHERE state = 'discarded') AS discarded,
       count(*) FILTER (WHERE state = 'cancelled') AS cancelled,
       extract(epoch FROM now() - min(scheduled_at) FILTER (WHERE state = 'available' AND scheduled_at <= now()))::float8
           AS oldest_wait_secs
FROM skiplock.jobs
GROUP BY queue
ORDER BY queue
