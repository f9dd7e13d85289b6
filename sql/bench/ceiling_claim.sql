-- The two-commit ceiling's first half: claim 100 due rows with SKIP LOCKED and mark them
-- running, as a commit of its own, returning what the completion needs. With
-- ceiling_complete.sql this is the least plain SQL that writes a job twice (running, then
-- finished), as a queue that shows its running jobs and rescues them must; the one-commit
-- ceiling (ceiling_step.sql) writes each job once.
WITH picked AS (
    SELECT ctid FROM public.ceiling_jobs
    WHERE state = 'available' AND queue = 'default' AND scheduled_at <= now()
    ORDER BY priority, scheduled_at, id
    LIMIT 100
    FOR UPDATE SKIP LOCKED
)
UPDATE public.ceiling_jobs j
SET state = 'running', attempt = j.attempt + 1, attempted_at = now(),
    attempted_by = 'ceiling', heartbeat_at = now()
FROM picked WHERE j.ctid = picked.ctid
RETURNING j.id, j.attempt
