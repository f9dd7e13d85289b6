-- The plain-SQL ceiling: mark the rows of ceiling_pick.sql (claimed with SKIP LOCKED) completed,
-- in one transaction. No heartbeats, no separate ack, no fencing: the most Postgres can do.
-- Locked rows are updated by ctid, as skiplock's claim does (sql/queue/claim.sql).
UPDATE public.ceiling_jobs j
SET state = 'completed', attempt = j.attempt + 1, attempted_at = now(), finalized_at = now()
FROM picked WHERE j.ctid = picked.ctid
