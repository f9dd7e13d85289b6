-- The SQL API version `skiplock migrate` recorded (one row).
SELECT api_version, api_hash, migrated_by FROM skiplock.schema_info
