-- Claim up to $3 due jobs of kinds $2 from the controlled queue $1 for worker $4, and up to $5
-- more into its buffer, within its limits (sql/api/15_control.sql). One row has id NULL: it
-- carries `controlled`, `wait_until` and `buffer_room`.
SELECT id, kind, queue, args, priority, attempt, max_attempts, scheduled_at, created_at,
       attempted_at, tags, meta, controlled, wait_until, buffer_room
FROM skiplock._claim_limited($1, $2::text[], $3::integer, $4, $5::integer)
