-- Moves the pending jobs of one apalis-postgres job type into skiplock.jobs, in one
-- transaction. Stop the apalis workers of that type first, and run `skiplock migrate` on the
-- database first (both schemas may live in one database, or use postgres_fdw/dblink for two).
--
--   psql "$DATABASE_URL" -v job_type='my_app::Email' -v kind='send-email' -v queue='default' \
--        -f docs/apalis-migrate.sql
--
-- job_type: apalis-postgres's queue name (`Config::queue`, by default the Rust type name of the
--           job's arguments, e.g. `my_app::Email`).
-- kind:     the skiplock kind the SkiplockStorage serves (`SkiplockStorage::new(pool, kind)`).
-- queue:    the skiplock queue (`.queue(..)`, default 'default').
--
-- What moves: rows that apalis would still run: Pending, Queued, Running (their workers are
-- stopped, so apalis would have re-enqueued them as orphans) and Failed with attempts left.
-- Each becomes an available skiplock job: its JSON arguments as `args` (a value that is not a
-- JSON object is wrapped as {"value": ...}, which SkiplockStorage unwraps), its run_at, its
-- priority (apalis: larger first; skiplock: smaller first, so negated), the attempts it has
-- left as max_attempts, and its idempotency key as a unique key (keep). Moved rows are deleted
-- from apalis.jobs; finished rows (Done, Killed, Failed without attempts left) stay there.
-- A key with a prefix skiplock reserves (fetch:, pack:, packet:) or a second pending row with
-- the same key makes the whole transaction fail with skiplock's message: nothing is moved.
BEGIN;

WITH moved AS (
    DELETE FROM apalis.jobs j
    WHERE j.job_type = :'job_type'
      AND (j.status IN ('Pending', 'Queued', 'Running')
           OR (j.status = 'Failed' AND j.attempts < j.max_attempts))
    RETURNING j.job, j.run_at, j.priority, j.attempts, j.max_attempts, j.idempotency_key
), decoded AS (
    SELECT convert_from(m.job, 'UTF8')::jsonb AS a, m.*
    FROM moved m
)
SELECT count(skiplock.enqueue(
           :'kind',
           CASE WHEN jsonb_typeof(d.a) = 'object' THEN d.a ELSE jsonb_build_object('value', d.a) END,
           queue => :'queue',
           run_at => d.run_at,
           priority => (-least(greatest(coalesce(d.priority, 0), 0), 32767))::smallint,
           max_attempts => greatest(d.max_attempts - d.attempts, 1),
           unique_key => d.idempotency_key
       )) AS moved_jobs
FROM decoded d;

COMMIT;
