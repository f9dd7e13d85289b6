-- The key-rate limit of the partition run's limited queue ($1): at most $2 starts per key
-- per second.
SELECT skiplock.set_key_limit($1, rate => $2, period => interval '1 second')
