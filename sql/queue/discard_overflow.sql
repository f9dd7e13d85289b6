-- Discards the jobs $1 a claim just took whose attempt counter is at its maximum
-- (sql/queue/claim.sql keeps it there): they cannot count another attempt, so they fail alone,
-- with the reason in their errors, and are not run.
UPDATE skiplock.jobs j
SET state = 'discarded', finalized_at = now(), heartbeat_at = NULL,
    errors = j.errors || jsonb_build_array(jsonb_build_object(
        'attempt', j.attempt, 'at', now(),
        'error', 'discarded at claim: its attempt counter is at its maximum (2147483647) and cannot count another attempt'))
WHERE j.id = ANY($1::bigint[]) AND j.state = 'running' AND j.attempt = 2147483647
