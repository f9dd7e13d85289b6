-- Keys held now (skiplock.hold_key or a handler's SnoozeKey), the longest hold first, with the
-- seconds left until each is released.
SELECT queue, limit_key, extract(epoch FROM until - now())::float8 AS seconds_left
FROM skiplock.key_holds
WHERE until > now()
ORDER BY until DESC, queue, limit_key
LIMIT $1
