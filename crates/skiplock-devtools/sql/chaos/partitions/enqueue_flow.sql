-- A fan-in in one statement: $3 jobs of kind $1 numbered $2.., then job $2 + $3 depending on
-- all of them; returns the ids, the fan-in's last.
WITH children AS (
    SELECT skiplock.enqueue_many($1,
        array_agg(jsonb_build_object('n', g, 'ms', floor(random() * 4)::int) ORDER BY g)) AS ids
    FROM generate_series($2::bigint, $2::bigint + $3 - 1) AS g
)
SELECT c.ids || skiplock.enqueue($1, jsonb_build_object('n', $2::bigint + $3, 'ms', 1), depends_on => c.ids)
FROM children c
