-- Enqueue many jobs of one kind in one statement.
SELECT skiplock.enqueue_many($1, $2, $3, coalesce($4, now()), $5, $6, $7, $8, $9, $10, $11, $12, $13)
