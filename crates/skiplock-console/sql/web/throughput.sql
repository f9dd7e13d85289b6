-- Overview chart: jobs completed and failed for good (discarded) in each of the last 60
-- minutes, oldest first, every minute present (zero when nothing finished). Reads only the
-- finished-rows index (state, finalized_at) for the last hour.
WITH per_minute AS (
    SELECT date_trunc('minute', j.finalized_at) AS minute,
           count(*) FILTER (WHERE j.state = 'completed') AS completed,
           count(*) FILTER (WHERE j.state = 'discarded') AS failed
    FROM skiplock.jobs j
    WHERE j.state IN ('completed', 'discarded')
      AND j.finalized_at >= date_trunc('minute', now()) - interval '59 minutes'
    GROUP BY 1
)
SELECT m.minute,
       coalesce(p.completed, 0)::int8 AS completed,
       coalesce(p.failed, 0)::int8 AS failed
FROM generate_series(date_trunc('minute', now()) - interval '59 minutes', date_trunc('minute', now()),
                     interval '1 minute') AS m(minute)
LEFT JOIN per_minute p ON p.minute = m.minute
ORDER BY m.minute
