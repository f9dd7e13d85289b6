-- One packet (the packet page).
SELECT p.id, p.source, p.name, p.state::text AS state, p.error, p.job_id, p.created_at, p.updated_at
FROM skiplock.packets p
WHERE p.id = $1
