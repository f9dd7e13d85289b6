-- Host $1's cached robots.txt.
SELECT robots_txt, robots_status, robots_fetched_at FROM skiplock.hosts WHERE host = $1
