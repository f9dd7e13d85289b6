-- The two-commit ceiling's first half: mark the rows of ceiling_pick.sql running, as a commit
-- of its own, returning what the completion needs. With ceiling_complete.sql this is the least
-- plain SQL that writes a job twice (running, then finished), as a queue that shows its running
-- jobs and rescues them must; the one-commit ceiling (ceiling_step.sql) writes each job once.
UPDATE public.ceiling_jobs j
SET state = 'running', attempt = j.attempt + 1, attempted_at = now(),
    attempted_by = 'ceiling', heartbeat_at = now()
FROM picked WHERE j.ctid = picked.ctid
RETURNING j.id, j.attempt
