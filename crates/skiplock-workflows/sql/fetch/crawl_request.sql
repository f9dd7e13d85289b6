-- Request the pages $2 of crawl $1 (force $3) that the crawl has not requested yet.
SELECT skiplock._crawl_request($1, $2, $3)
