-- The pressure benchmark's producer: $1 no-op jobs in one enqueue_many call.
SELECT cardinality(skiplock.enqueue_many('noop', array_fill('{}'::jsonb, ARRAY[$1::int])))
