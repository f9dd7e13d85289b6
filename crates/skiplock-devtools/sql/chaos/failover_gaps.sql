-- Per failover ($1: when each began, $2: when the cluster had a synchronous standby again):
-- the longest time without a completed chaos_record job that began in that window (from a
-- second before it), in seconds, and when that gap began: the gap as the queue sees it.
WITH done AS (
    SELECT finalized_at AS at, lead(finalized_at) OVER (ORDER BY finalized_at) AS next
    FROM skiplock.jobs
    WHERE kind = 'chaos_record' AND state = 'completed'
), f AS (
    SELECT * FROM unnest($1::timestamptz[], $2::timestamptz[]) WITH ORDINALITY AS u(t, healed, i)
)
SELECT coalesce(extract(epoch FROM g.gap), 0)::float8 AS gap, g.at AS began
FROM f
LEFT JOIN LATERAL (
    SELECT done.next - done.at AS gap, done.at
    FROM done
    WHERE done.at >= f.t - interval '1 second' AND done.at < f.healed AND done.next IS NOT NULL
    ORDER BY done.next - done.at DESC
    LIMIT 1
) g ON true
ORDER BY f.i
