-- The job page's Cancel button (skiplock.cancel).
SELECT skiplock.cancel($1)::text
