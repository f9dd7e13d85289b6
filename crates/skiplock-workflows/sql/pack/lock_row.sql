-- Make host $1's lock row (sql/pack/lock.sql) if it is missing. Its own short statement,
-- before the pack's transaction begins, so it never waits for a pack in progress.
INSERT INTO skiplock.locks (name) VALUES (skiplock.pack_key($1)) ON CONFLICT DO NOTHING
