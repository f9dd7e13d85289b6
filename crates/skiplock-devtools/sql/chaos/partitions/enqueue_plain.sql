-- Enqueue $3 jobs of kind $1 numbered $2.. in queue 'default' in one statement, each working
-- 0..$4 ms (plus $5 ms: a long job past the rescue window); returns their ids in order.
SELECT skiplock.enqueue_many($1,
    array_agg(jsonb_build_object('n', g, 'ms', $5::int + floor(random() * ($4 + 1))::int) ORDER BY g))
FROM generate_series($2::bigint, $2::bigint + $3 - 1) AS g
