-- Bulk Cancel of the filtered set (state $1, kind $2, queue $3, text $4), at most $5 jobs.
SELECT skiplock.cancel_jobs($1::skiplock.job_state, $2, $3, $4, $5)
