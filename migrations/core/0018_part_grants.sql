-- An optional part's grants to skiplock's roles, recorded when a program with the part
-- migrates (src/store/schema.rs, `PartSchema::grants`), so that every program's migrate
-- re-applies them after the core's roles file re-granted the worker role every table
-- (sql/api/95_part_grants.sql): a program built without the part keeps, say, the packet
-- history append-only for the worker role.
ALTER TABLE skiplock.schema_parts ADD COLUMN grants text;
