-- One packet, for operators and the handler.
SELECT id, source, name, state, error, result, job_id, created_at, updated_at
FROM skiplock.packets
WHERE id = $1
