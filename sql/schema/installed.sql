-- Which parts of skiplock's schema exist: the tables at all (`schema`), and the record of the
-- SQL API version (`versioned`, since migration 7).
SELECT to_regclass('_sqlx_migrations') IS NOT NULL
       AND to_regclass('skiplock.jobs') IS NOT NULL AS schema,
       to_regclass('skiplock.schema_info') IS NOT NULL AS versioned
