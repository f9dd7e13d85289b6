-- Record a request for page $1 that stored no content: status $4 (NULL when not sent),
-- why ($5), next due $6, fetched at $7 (NULL keeps the old value). Content is kept.
INSERT INTO skiplock.pages AS p (url, host, path, http_status, note, next_fetch, last_fetched, updated_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, now())
ON CONFLICT (url) DO UPDATE
SET http_status = EXCLUDED.http_status, note = EXCLUDED.note, next_fetch = EXCLUDED.next_fetch,
    last_fetched = coalesce(EXCLUDED.last_fetched, p.last_fetched), updated_at = now()
