-- During a crawl run: pages stored with HTTP 200.
SELECT count(*) FROM skiplock.pages WHERE http_status = 200
