-- Crawl page: the pages of host $1 with an id above $2 (NULL: from the first), $3 rows,
-- with their last status code.
SELECT id, url, http_status, title, last_fetched, next_fetch, note
FROM skiplock.pages
WHERE host = $1 AND ($2::int8 IS NULL OR id > $2)
ORDER BY id
LIMIT $3
