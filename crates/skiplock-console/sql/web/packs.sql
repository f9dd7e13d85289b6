-- Crawl page: per host, the last pack (artifact key, size, pages) and the pending timer.
SELECT host, packed_at, pages, bytes, object_key, store, pack_count, timer_job_id, timer_at
FROM skiplock.pack_status
ORDER BY host
LIMIT $1
