-- Record the SQL API of optional part $1 just installed: hash $2, by skiplock release $3,
-- with its grants $4 (sql/api/95_part_grants.sql applies every part's).
INSERT INTO skiplock.schema_parts (part, api_hash, migrated_by, migrated_at, grants)
VALUES ($1, $2, $3, now(), $4)
ON CONFLICT (part) DO UPDATE
SET api_hash = EXCLUDED.api_hash, migrated_by = EXCLUDED.migrated_by,
    migrated_at = EXCLUDED.migrated_at, grants = EXCLUDED.grants
