-- Client connections to database $1 other than the benchmark's monitor (application_name $2).
-- A backend leaves pg_stat_activity only after it flushed its statistics (PostgreSQL 15: the
-- stats shutdown hook runs before the backend-status one), so zero here means every commit
-- of the others is counted in pg_stat_database.
SELECT count(*) FROM pg_stat_activity
WHERE datname = $1 AND backend_type = 'client backend' AND application_name IS DISTINCT FROM $2
