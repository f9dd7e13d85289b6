-- The migrations of a part applied successfully ({table}: the part's record, a fixed name of
-- src/store/schema.rs, never input).
SELECT version FROM {table} WHERE success ORDER BY version
