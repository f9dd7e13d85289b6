-- Record a finished pack of host $1.
INSERT INTO skiplock.packs AS p (host, packed_at, pages, bytes, object_key, store, job_id, duration_ms)
VALUES ($1, now(), $2, $3, $4, $5, $6, $7)
ON CONFLICT (host) DO UPDATE
SET packed_at = now(),
    pages = EXCLUDED.pages,
    bytes = EXCLUDED.bytes,
    object_key = EXCLUDED.object_key,
    store = EXCLUDED.store,
    job_id = EXCLUDED.job_id,
    duration_ms = EXCLUDED.duration_ms,
    pack_count = p.pack_count + 1
