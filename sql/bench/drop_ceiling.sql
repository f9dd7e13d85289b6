-- The ceiling's table goes at the end of its run.
DROP TABLE public.ceiling_jobs
