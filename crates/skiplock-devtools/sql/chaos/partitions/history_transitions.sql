-- Every recorded state change, for the history checker.
SELECT job_id, old_attempt, new_attempt, old_state, new_state, old_owner, new_owner, changed_by,
       port, rescue, last_beat, at
FROM skiplock_faults.transitions ORDER BY id
