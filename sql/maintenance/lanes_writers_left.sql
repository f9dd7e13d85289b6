-- How many of the transactions $1 (virtual transaction ids) are still running.
SELECT skiplock._lanes_writers_left($1::text[])
