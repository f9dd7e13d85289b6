-- Crawl page: every host with pages or a robots.txt/politeness row (at most $1), its page
-- counts, last and next fetch, and the next fetch start its politeness allows: from the fetch
-- queue's per-key rate state (skiplock.key_rates, GCRA: tat - (period - period / rate));
-- NULL when a fetch of the host may start now.
SELECT coalesce(h.host, p.host) AS host,
       coalesce(p.pages, 0)::int8 AS pages,
       coalesce(p.fetched, 0)::int8 AS fetched,
       p.last_fetched, p.next_fetch,
       (SELECT CASE WHEN kr.tat - (c.key_period - c.key_period / c.key_rate) > now()
                    THEN kr.tat - (c.key_period - c.key_period / c.key_rate) END
        FROM skiplock.key_rates kr
        JOIN skiplock.queues c ON c.queue = kr.queue AND c.key_rate IS NOT NULL
        WHERE kr.queue = 'fetch' AND kr.limit_key = coalesce(h.host, p.host)) AS next_start
FROM skiplock.hosts h
FULL JOIN (
    SELECT pg.host, count(*) AS pages, count(pg.last_fetched) AS fetched,
           max(pg.last_fetched) AS last_fetched, min(pg.next_fetch) AS next_fetch
    FROM skiplock.pages pg
    GROUP BY pg.host
) p ON p.host = h.host
ORDER BY 1
LIMIT $1
