-- The enqueue_many baseline: one plain INSERT … SELECT of the given args into the ceiling's
-- table (shaped like skiplock.jobs, same indexes, no trigger, no checks), ids returned.
INSERT INTO public.ceiling_jobs (kind, args, queue)
SELECT $1, a, $2 FROM unnest($3::jsonb[]) AS a
RETURNING id
