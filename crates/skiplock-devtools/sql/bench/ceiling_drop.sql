-- The ceiling's table is gone after each run.
DROP TABLE public.ceiling_jobs
