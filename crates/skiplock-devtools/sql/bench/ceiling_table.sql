-- The ceiling's table: shaped like skiplock.jobs (same columns, defaults and indexes), but
-- with no trigger and nothing of skiplock's runtime around it.
DROP TABLE IF EXISTS public.ceiling_jobs;
CREATE TABLE public.ceiling_jobs (LIKE skiplock.jobs INCLUDING ALL)
WITH (fillfactor = 70, autovacuum_vacuum_scale_factor = 0.01);
