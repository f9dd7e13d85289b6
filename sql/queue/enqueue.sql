-- Enqueue one job through the SQL API (same rules for Rust, the CLI and psql): its id and what
-- the enqueue did (inserted, deduplicated, replaced).
SELECT id, outcome::text AS outcome
FROM skiplock.enqueue_result($1, $2, $3, coalesce($4, now()), $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)
