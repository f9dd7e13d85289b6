-- Enqueue $4 jobs of kind $1 numbered $3.. in queue $2 in one statement, each under one of
-- $5 limit keys (the queue's key-rate limit applies), working 0..$6 ms; returns their ids.
SELECT array_agg(skiplock.enqueue($1, jsonb_build_object('n', g, 'ms', floor(random() * ($6 + 1))::int),
                                  queue => $2, limit_key => 'k' || (g % $5)) ORDER BY g)
FROM generate_series($3::bigint, $3::bigint + $4 - 1) AS g
