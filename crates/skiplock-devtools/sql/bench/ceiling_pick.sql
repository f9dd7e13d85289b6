-- The claim both plain-SQL ceilings share (ceiling_step.sql, ceiling_claim.sql): 100 due rows
-- with SKIP LOCKED, as skiplock's claim picks them; the statement's UPDATE follows this CTE.
WITH picked AS (
    SELECT ctid FROM public.ceiling_jobs
    WHERE state = 'available' AND queue = 'default' AND scheduled_at <= now()
    ORDER BY priority, scheduled_at, id
    LIMIT 100
    FOR NO KEY UPDATE SKIP LOCKED
)
