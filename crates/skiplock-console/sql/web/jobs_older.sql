-- Jobs page, newest first: the filtered jobs with an id below $5 (NULL: from the newest),
-- $6 rows. Keyset paging on the primary key: with no filter, or a common one, the backward
-- index scan stops after $6 matches however many finished rows there are. Filters: state
-- $1, kind $2, queue $3, text $4 in args or errors, tag $7, meta $8 contained (skiplock._job_matches; NULL: any).
-- The console's sessions use plan_cache_mode = force_custom_plan, so each execution is
-- planned with its own values (the NULL filters fold away).
SELECT j.id, j.kind, j.queue, j.state::text AS state, j.priority, j.attempt, j.max_attempts,
       j.scheduled_at, j.created_at, j.finalized_at,
       left(j.args::text, 160) AS args_preview,
       left(j.errors -> -1 ->> 'error', 160) AS last_error
FROM skiplock.jobs j
WHERE skiplock._job_matches(j, $1::skiplock.job_state, $2, $3, $4, $7, $8::jsonb)
  AND ($5::int8 IS NULL OR j.id < $5)
ORDER BY j.id DESC
LIMIT $6
