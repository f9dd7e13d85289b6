-- Packets board: every packet someone has to move (all but done), at most $1 per state,
-- oldest first within a state (the one waiting longest comes first).
SELECT p.id, p.source, p.name, p.state::text AS state, p.error, p.job_id, p.created_at, p.updated_at
FROM (
    SELECT p.*, row_number() OVER (PARTITION BY p.state ORDER BY p.id) AS rn
    FROM skiplock.packets p
    WHERE p.state <> 'done'
) p
WHERE p.rn <= $1
ORDER BY p.state, p.id
