-- Cache host $1's robots.txt ($2 text, $3 status).
INSERT INTO skiplock.hosts (host, robots_txt, robots_status, robots_fetched_at)
VALUES ($1, $2, $3, now())
ON CONFLICT (host) DO UPDATE
SET robots_txt = EXCLUDED.robots_txt, robots_status = EXCLUDED.robots_status,
    robots_fetched_at = EXCLUDED.robots_fetched_at
