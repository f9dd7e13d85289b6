-- Unique keys are namespaced by kind and queue: at most one available job per
-- (kind, queue, unique_key), instead of per unique_key across every kind and queue. With the
-- key alone, one tenant could hold another's key (their keyed enqueue then failed for as
-- long as the squatting job waited) or, with on_conflict 'replace', see and overwrite
-- another's waiting job (docs/security.md). The ON CONFLICT targets of the SQL API
-- (skiplock._enqueue, _request_fetch, pack_arm_at, pack_now) and every lookup of a key's
-- holder (skiplock._superseded_by, retry, retry_jobs) name kind, queue and key.
--
-- Upgrade-safe: the old index was stricter (one available job per key at all), so the rows of
-- any earlier release satisfy the new one, and the new index is built before the old is
-- dropped, so no moment is without one. Both statements run in the migration's transaction.
CREATE UNIQUE INDEX IF NOT EXISTS jobs_unique_available_kind_queue_idx
    ON skiplock.jobs (kind, queue, unique_key)
    WHERE state = 'available' AND unique_key IS NOT NULL;
DROP INDEX IF EXISTS skiplock.jobs_unique_available_idx;
