-- The ceiling's table fresh before its timed loop, as skiplock.jobs is before a drain.
VACUUM ANALYZE public.ceiling_jobs
