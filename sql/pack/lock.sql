-- One pack per host at a time, across processes: a transaction-level advisory lock, released
-- by commit, rollback, or the connection dying with its process.
SELECT pg_try_advisory_xact_lock(hashtext('skiplock.pack'), hashtext($1))
