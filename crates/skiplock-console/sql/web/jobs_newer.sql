-- Jobs page, the page before: the filtered jobs with an id above $5, the $6 nearest to it
-- (oldest first here; the console shows them newest first). Filters as in jobs_older.sql.
SELECT j.id, j.kind, j.queue, j.state::text AS state, j.priority, j.attempt, j.max_attempts,
       j.scheduled_at, j.created_at, j.finalized_at,
       left(j.args::text, 160) AS args_preview,
       left(j.errors -> -1 ->> 'error', 160) AS last_error
FROM skiplock.jobs j
WHERE skiplock._job_matches(j, $1::skiplock.job_state, $2, $3, $4, $7, $8::jsonb)
  AND j.id > $5
ORDER BY j.id
LIMIT $6
