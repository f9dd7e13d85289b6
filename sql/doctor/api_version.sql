-- The SQL API version and hash `skiplock migrate` recorded (no row: none recorded).
SELECT api_version, api_hash, migrated_by FROM skiplock.schema_info
