-- What a fetch needs to know about page $1 before it decides.
SELECT next_fetch, etag, last_modified, links FROM skiplock.pages WHERE url = $1
