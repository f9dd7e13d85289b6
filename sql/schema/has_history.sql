-- Whether a release up to SQL API 7 migrated this database (its one migration history).
SELECT to_regclass('_sqlx_migrations') IS NOT NULL
