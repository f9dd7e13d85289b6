-- The sqlx migrations applied successfully.
SELECT version FROM _sqlx_migrations WHERE success ORDER BY version
