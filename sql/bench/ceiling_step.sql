-- The plain-SQL ceiling: claim 100 due rows with SKIP LOCKED and mark them completed, in one
-- transaction. No heartbeats, no separate ack, no fencing: the most Postgres can do. Locked
-- rows are updated by ctid, as skiplock's claim does (sql/queue/claim.sql).
WITH picked AS (
    SELECT ctid FROM public.ceiling_jobs
    WHERE state = 'available' AND queue = 'default' AND scheduled_at <= now()
    ORDER BY priority, scheduled_at, id
    LIMIT 100
    FOR UPDATE SKIP LOCKED
)
UPDATE public.ceiling_jobs j
SET state = 'completed', attempt = j.attempt + 1, attempted_at = now(), finalized_at = now()
FROM picked WHERE j.ctid = picked.ctid
