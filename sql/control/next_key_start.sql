-- When key $2 of queue $1 may start next under its rate limit (NULL: now, or no rate limit).
SELECT CASE WHEN kr.tat - (c.key_period - c.key_period / c.key_rate) > now()
            THEN kr.tat - (c.key_period - c.key_period / c.key_rate) END
FROM skiplock.key_rates kr
JOIN skiplock.queues c ON c.queue = kr.queue AND c.key_rate IS NOT NULL
WHERE kr.queue = $1 AND kr.limit_key = $2
