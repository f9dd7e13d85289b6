-- Claim up to $3 due jobs of kinds $2 from the controlled queue $1 for worker $4, within its
-- limits (sql/api/15_limits.sql). One row has id NULL: it carries `controlled` and `wait_until`.
SELECT id, kind, queue, args, priority, attempt, max_attempts, scheduled_at, created_at,
       attempted_at, controlled, wait_until
FROM skiplock._claim_limited($1, $2::text[], $3::integer, $4)
