-- Record the SIGKILLs of a run: $1 pids, $2 times.
INSERT INTO skiplock_chaos.kills (pid, at) SELECT * FROM unnest($1::integer[], $2::timestamptz[])
