-- Which parts of skiplock's schema exist: the tables at all (`schema`: the jobs table and the
-- record of its migrations, in parts or as the history of releases up to SQL API 7), and the
-- record of the SQL API version (`versioned`).
SELECT (to_regclass('skiplock.migrations_core') IS NOT NULL OR to_regclass('_sqlx_migrations') IS NOT NULL)
       AND to_regclass('skiplock.jobs') IS NOT NULL AS schema,
       to_regclass('skiplock.schema_info') IS NOT NULL AS versioned
