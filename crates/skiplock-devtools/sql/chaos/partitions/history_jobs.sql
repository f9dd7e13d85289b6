-- The jobs at the end of a run, for the history checker.
SELECT id, state::text AS state, attempt, (args->>'n')::bigint AS n, unique_key,
       (result->>'exec')::bigint AS result_exec, finalized_at, heartbeat_at, attempted_by
FROM skiplock.jobs ORDER BY id
