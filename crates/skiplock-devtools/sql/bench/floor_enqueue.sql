-- The latency floor's enqueue: a plain one-row INSERT into the ceiling's table (shaped like
-- skiplock.jobs, no trigger, nothing of skiplock's API) and a NOTIFY to the floor's listener,
-- committed together in one statement. Returns the statement's start on the database clock,
-- in ms (what skiplock's created_at records).
WITH i AS (
    INSERT INTO public.ceiling_jobs (kind, args, queue) VALUES ('noop', '{}', 'floor')
    RETURNING id
),
n AS (
    SELECT pg_notify('skiplock_bench_floor', '') FROM i
)
-- The uncorrelated sub-select runs once (an InitPlan), so the notification is sent.
SELECT extract(epoch FROM now())::float8 * 1000 FROM i WHERE (SELECT count(*) FROM n) >= 0
