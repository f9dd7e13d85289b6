-- Every enqueue of the run, for the history checker.
SELECT op, what, ns, ok, ids, outcome, error FROM skiplock_faults.enqueues ORDER BY op
