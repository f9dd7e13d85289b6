-- Record the SQL API just installed: version $1, hash $2, by skiplock release $3.
INSERT INTO skiplock.schema_info (id, api_version, api_hash, migrated_by, migrated_at)
VALUES (true, $1, $2, $3, now())
ON CONFLICT (id) DO UPDATE
SET api_version = EXCLUDED.api_version, api_hash = EXCLUDED.api_hash,
    migrated_by = EXCLUDED.migrated_by, migrated_at = EXCLUDED.migrated_at
