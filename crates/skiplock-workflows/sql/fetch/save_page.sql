-- Store fetched page $1 (host $2, path $3) with its content; returns whether the content
-- hash changed (a new page counts as changed). The CTE reads the row before the upsert.
WITH prev AS (SELECT content_hash FROM skiplock.pages WHERE url = $1)
INSERT INTO skiplock.pages AS p
    (url, host, path, last_fetched, next_fetch, http_status, etag, last_modified,
     content_hash, title, headings, body, links, note, updated_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, now())
ON CONFLICT (url) DO UPDATE
SET host = EXCLUDED.host, path = EXCLUDED.path, last_fetched = EXCLUDED.last_fetched,
    next_fetch = EXCLUDED.next_fetch, http_status = EXCLUDED.http_status,
    etag = EXCLUDED.etag, last_modified = EXCLUDED.last_modified,
    content_hash = EXCLUDED.content_hash, title = EXCLUDED.title,
    headings = EXCLUDED.headings, body = EXCLUDED.body, links = EXCLUDED.links,
    note = EXCLUDED.note, updated_at = now()
RETURNING (SELECT content_hash FROM prev) IS DISTINCT FROM p.content_hash
