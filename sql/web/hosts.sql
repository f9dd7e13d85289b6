-- Crawl page: every host with pages or a politeness row (at most $1), its page counts, last
-- and next fetch, and its politeness slot (next_slot_at: the slot the next fetch gets;
-- busy_until: no request before it).
SELECT coalesce(h.host, p.host) AS host,
       coalesce(p.pages, 0)::int8 AS pages,
       coalesce(p.fetched, 0)::int8 AS fetched,
       p.last_fetched, p.next_fetch,
       h.next_slot_at, h.busy_until
FROM skiplock.hosts h
FULL JOIN (
    SELECT pg.host, count(*) AS pages, count(pg.last_fetched) AS fetched,
           max(pg.last_fetched) AS last_fetched, min(pg.next_fetch) AS next_fetch
    FROM skiplock.pages pg
    GROUP BY pg.host
) p ON p.host = h.host
ORDER BY 1
LIMIT $1
