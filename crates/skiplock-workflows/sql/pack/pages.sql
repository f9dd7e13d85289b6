-- The pages of host $1 that have content, in a stable order, for the artifact.
SELECT url, path, title, headings, body, last_fetched
FROM skiplock.pages
WHERE host = $1 AND body IS NOT NULL
ORDER BY url
