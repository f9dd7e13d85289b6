-- $1 due noop rows for the ceiling run.
INSERT INTO public.ceiling_jobs (kind, args)
SELECT 'noop', '{}'::jsonb FROM generate_series(1, $1)
