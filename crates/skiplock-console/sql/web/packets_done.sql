-- Packets board: the $1 packets finished last.
SELECT p.id, p.source, p.name, p.state::text AS state, p.error, p.job_id, p.created_at, p.updated_at
FROM skiplock.packets p
WHERE p.state = 'done'
ORDER BY p.updated_at DESC, p.id DESC
LIMIT $1
