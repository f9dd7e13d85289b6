-- Before a crawl run: no page, host, crawl or key rate state of an earlier run.
TRUNCATE skiplock.pages, skiplock.hosts, skiplock.crawl_pages, skiplock.crawls, skiplock.key_rates
