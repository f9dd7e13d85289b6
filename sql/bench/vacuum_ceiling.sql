-- Fresh statistics for the ceiling's table.
VACUUM ANALYZE public.ceiling_jobs
