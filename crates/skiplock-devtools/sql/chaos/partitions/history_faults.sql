-- Every injected fault, for the history checker.
SELECT kind, slot, pid, port, started_at, ended_at FROM skiplock_faults.faults ORDER BY started_at
