-- Pack status of every host, or of host $1.
SELECT host, packed_at, pages, bytes, object_key, store, pack_count, job_id, timer_job_id, timer_at
FROM skiplock.pack_status
WHERE $1::text IS NULL OR host = lower(btrim($1))
ORDER BY host
