-- The record of workflow part $1's SQL API (no row: not installed).
SELECT api_hash, migrated_by FROM skiplock.schema_parts WHERE part = $1
