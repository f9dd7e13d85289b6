-- The crawl page's Pack now button (skiplock.pack_now); returns the do-the-packing job.
SELECT skiplock.pack_now($1)
