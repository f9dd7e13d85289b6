-- The admission phase's backlog: $1 no-op jobs waiting in the bench queue, one enqueue_many.
SELECT cardinality(skiplock.enqueue_many('noop', array_fill('{}'::jsonb, ARRAY[$1::int]), queue => 'bench'))
