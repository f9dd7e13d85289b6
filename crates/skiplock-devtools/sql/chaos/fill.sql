-- Enqueue chaos_record jobs $1..$2 in one statement; each works for 0..$3 ms.
SELECT cardinality(skiplock.enqueue_many('chaos_record',
    array_agg(jsonb_build_object('n', g, 'ms', floor(random() * ($3 + 1))::int) ORDER BY g)))
FROM generate_series($1::bigint, $2::bigint) AS g
