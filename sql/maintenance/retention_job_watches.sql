-- Forget at most $1 watches (skiplock.job_watches) no watcher has refreshed for a day: a
-- watcher refreshes its row every minute while it waits (skiplock.watch).
WITH gone AS (
    SELECT w.job_id FROM skiplock.job_watches w
    WHERE w.since < now() - interval '1 day'
    LIMIT $1
    FOR UPDATE SKIP LOCKED
)
DELETE FROM skiplock.job_watches w USING gone WHERE w.job_id = gone.job_id
