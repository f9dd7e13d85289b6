-- One period of a periodic job, enqueued at most once across all processes.
SELECT skiplock.enqueue_periodic($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
