-- Bulk Retry of the filtered set (state $1, kind $2, queue $3, text $4, tag $6,
-- meta $7 contained), at most $5 jobs.
SELECT skiplock.retry_jobs($1::skiplock.job_state, $2, $3, $4, $5, $6, $7::jsonb)
