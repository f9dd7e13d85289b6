-- The two-commit ceiling's second half: mark the claimed rows completed, fenced on the
-- attempt that claimed them (as any ack that must not overwrite a rescued job's next attempt).
UPDATE public.ceiling_jobs j
SET state = 'completed', finalized_at = now(), heartbeat_at = NULL
FROM unnest($1::bigint[], $2::integer[]) AS a(id, attempt)
WHERE j.id = a.id AND j.state = 'running' AND j.attempt = a.attempt
