-- One pack per host at a time, across processes: host $1's row in skiplock.locks, locked
-- inside the pack's transaction (released by commit, rollback, or the connection dying with
-- its process). SKIP LOCKED: no row means another pack of the host is running, and the job
-- snoozes instead of waiting. A row of a skiplock table, not an advisory lock: no other
-- login can hold it (advisory locks live in a keyspace every login shares).
SELECT true FROM skiplock.locks WHERE name = skiplock.pack_key($1) FOR UPDATE SKIP LOCKED
