-- Reserved names: the job kinds, queues, queue prefixes and unique-key prefixes only
-- skiplock's own functions may enqueue under (skiplock.reserved_names, migrations/core/
-- 0003_parts.sql). Each part's SQL API file writes its rows; this file, applied after all of
-- them, writes the core's and builds the two functions the SQL API checks them with, each one
-- CASE expression over the rows as they are now, so Postgres inlines it and an enqueue runs
-- no query for it. A generic enqueue of such a job is refused (skiplock.enqueue,
-- skiplock.enqueue_many, and the Rust API before the round trip), naming what to use instead:
-- a caller could otherwise fill a workflow's queue, stop maintenance, or squat or steer a
-- workflow's key. A database's rows outlive the program that migrated it: a core-only program
-- migrating a database with a workflow keeps that workflow's names reserved.

-- The core's own: the worker's maintenance jobs (periodic `reap` and `retain` in queue
-- skiplock.maintenance, enqueued by skiplock.enqueue_periodic), every `skiplock.` queue, and
-- the keys `unique_by` derives (`args:`, each of its key scope: skiplock._unique_args_key), so
-- no caller names another's.
INSERT INTO skiplock.reserved_names (part, what, name, use_instead) VALUES
    ('core', 'queue_prefix', 'skiplock.', 'the worker''s own maintenance (periodic jobs: skiplock.enqueue_periodic)'),
    ('core', 'kind', 'reap', 'the worker''s own maintenance (periodic jobs: skiplock.enqueue_periodic)'),
    ('core', 'kind', 'retain', 'the worker''s own maintenance (periodic jobs: skiplock.enqueue_periodic)'),
    ('core', 'key_prefix', 'args:', 'unique_by, whose keys belong to the login that enqueues')
ON CONFLICT (what, name) DO UPDATE SET part = EXCLUDED.part, use_instead = EXCLUDED.use_instead;

DO $reserved$
DECLARE
    prefix_case text;
    job_case text;
BEGIN
    -- skiplock._reserved_key_prefix(key): the reserved prefix `key` starts with, or NULL
    -- (also for a NULL key).
    SELECT string_agg(format('WHEN starts_with(key, %L) THEN %L', r.name, r.name), ' '
                      ORDER BY length(r.name) DESC, r.name)
    INTO prefix_case
    FROM skiplock.reserved_names r WHERE r.what = 'key_prefix';
    EXECUTE format($f$
        CREATE OR REPLACE FUNCTION skiplock._reserved_key_prefix(key text)
        RETURNS text LANGUAGE sql IMMUTABLE AS $body$ SELECT CASE %s END $body$
    $f$, coalesce(prefix_case, 'WHEN false THEN NULL::text'));

    -- skiplock._reserved_job(kind, queue): what to use instead of a generic enqueue of such a
    -- job, or NULL. The core's names first, then each part's, in name order.
    SELECT string_agg(format('WHEN %s THEN %L', g.cond, g.use_instead), ' '
                      ORDER BY g.part <> 'core', g.part, g.use_instead)
    INTO job_case
    FROM (SELECT r.part, r.use_instead,
                 string_agg(CASE r.what
                                WHEN 'kind' THEN format('kind = %L', r.name)
                                WHEN 'queue' THEN format('queue = %L', r.name)
                                WHEN 'queue_prefix' THEN format('starts_with(queue, %L)', r.name)
                            END, ' OR ' ORDER BY r.what, r.name) AS cond
          FROM skiplock.reserved_names r
          WHERE r.what IN ('kind', 'queue', 'queue_prefix')
          GROUP BY r.part, r.use_instead) g;
    EXECUTE format($f$
        CREATE OR REPLACE FUNCTION skiplock._reserved_job(kind text, queue text)
        RETURNS text LANGUAGE sql IMMUTABLE AS $body$ SELECT CASE %s END $body$
    $f$, coalesce(job_case, 'WHEN false THEN NULL::text'));
END;
$reserved$;
