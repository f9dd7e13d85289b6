-- Packets, newest first, optionally in one state ($1 NULL: every state); $2 rows at most.
SELECT id, source, name, state, error, result, job_id, created_at, updated_at
FROM skiplock.packets
WHERE $1::skiplock.packet_state IS NULL OR state = $1
ORDER BY id DESC
LIMIT $2
