-- Record the SQL API of workflow part $1 just installed: hash $2, by skiplock release $3.
INSERT INTO skiplock.schema_parts (part, api_hash, migrated_by, migrated_at)
VALUES ($1, $2, $3, now())
ON CONFLICT (part) DO UPDATE
SET api_hash = EXCLUDED.api_hash, migrated_by = EXCLUDED.migrated_by,
    migrated_at = EXCLUDED.migrated_at
