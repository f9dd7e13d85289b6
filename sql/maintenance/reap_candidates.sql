-- Unfinished jobs that may be abandoned: past the reaper's maximum age ($1 seconds) and not
-- held ($3: seconds within which a worker's heartbeat makes it live). The reaper appends
-- `LIMIT $2 FOR NO KEY UPDATE OF j SKIP LOCKED` (locked so no worker claims one while it decides;
-- claims use SKIP LOCKED and skip these); `skiplock reap --dry-run` appends
-- `ORDER BY j.id LIMIT $2`. The same rule as `reaper::is_too_old` (which makes the final
-- decision, docs/maintenance.md "The reaper"): a running job is judged by attempted_at (by its
-- heartbeat while it waits unstarted in a worker's buffer), any other by scheduled_at, falling
-- back to the other, then created_at; a job scheduled in the
-- future is never too old; an available job is never taken while something holds it: its
-- queue is paused, a limit of its queue may be what keeps it waiting (the queue's
-- concurrency; a key's concurrency or rate, for a job with a limit_key), or no live worker
-- handles its kind in its queue. Held jobs are left out here, not only by the rule, so a
-- paused queue's backlog never fills the batches the abandoned rows need.
SELECT now() AS db_now, j.id, j.kind, j.queue, j.args::text AS args, j.state, j.attempt,
       j.scheduled_at, j.created_at, j.attempted_at, j.attempted_by, j.heartbeat_at,
       h.queue_paused, h.queue_limited, h.claimable
FROM skiplock.jobs j
LEFT JOIN skiplock.queues c ON c.queue = j.queue
-- What the live workers handle, read once per statement (not once per row, which also made
-- the planner's estimate, on a workers table without statistics, large enough to JIT-compile
-- the query): the kinds of workers serving every queue, and [kind, queue] pairs of the others.
CROSS JOIN (
    SELECT coalesce((SELECT array_agg(k) FROM skiplock.workers w, unnest(w.kinds) k
                     WHERE w.heartbeat_at > now() - make_interval(secs => $3)
                       AND cardinality(w.queues) = 0), '{}') AS every_queue,
           coalesce((SELECT jsonb_agg(jsonb_build_array(k, q))
                     FROM skiplock.workers w, unnest(w.kinds) k, unnest(w.queues) q
                     WHERE w.heartbeat_at > now() - make_interval(secs => $3)), '[]') AS pairs
) lw
CROSS JOIN LATERAL (
    SELECT coalesce(c.paused, false) AS queue_paused,
           (c.concurrency IS NOT NULL
            OR (j.limit_key IS NOT NULL
                AND (c.key_concurrency IS NOT NULL OR c.key_rate IS NOT NULL))) AS queue_limited,
           (j.kind = ANY(lw.every_queue) OR lw.pairs @> jsonb_build_array(jsonb_build_array(j.kind, j.queue)))
               AS claimable
) h
-- Written as one branch per state so the planner reads only the two partial indexes of
-- unfinished rows (jobs_claim_idx, jobs_running_key_idx), never the finished bulk of the table.
WHERE ((j.state = 'available'
        AND coalesce(j.scheduled_at, j.attempted_at, j.created_at) < now() - make_interval(secs => $1)
        AND NOT h.queue_paused AND NOT h.queue_limited AND h.claimable)
    OR (j.state = 'running'
        AND coalesce(j.attempted_at, j.heartbeat_at, j.scheduled_at, j.created_at) < now() - make_interval(secs => $1)))
  AND j.scheduled_at <= now()
