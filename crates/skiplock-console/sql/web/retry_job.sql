-- The job page's Retry button (skiplock.retry: available now).
SELECT skiplock.retry($1)::text
