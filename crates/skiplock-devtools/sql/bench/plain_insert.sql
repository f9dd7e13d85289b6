-- The single-enqueue baseline: one plain INSERT of one row into the ceiling's table (shaped
-- like skiplock.jobs, same indexes, no trigger, no SQL API), committed on its own.
INSERT INTO public.ceiling_jobs (kind, args, queue) VALUES ($1, $2, $3) RETURNING id
