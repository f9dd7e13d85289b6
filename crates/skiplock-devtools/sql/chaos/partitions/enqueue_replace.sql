-- A debounce: job $2 of kind $1 under unique key $3, replacing the waiting job that holds
-- the key (args and due time), due in $4 ms; returns its id and what happened.
SELECT e.id, e.outcome::text
FROM skiplock.enqueue_result($1, jsonb_build_object('n', $2::bigint, 'ms', 1),
                             run_at => now() + make_interval(secs => $4::float8 / 1000),
                             unique_key => $3, on_conflict => 'replace') e
