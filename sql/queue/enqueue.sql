-- Enqueue one job through the SQL API (same rules for Rust, the CLI and psql).
SELECT skiplock.enqueue($1, $2, $3, coalesce($4, now()), $5, $6, $7, $8, $9)
