-- Pickup latency (ms, `attempted_at - created_at`, both the database's clock) of every job
-- whose ack committed a completion with finalized_at in ($1, $2] (epoch seconds): one range of
-- jobs_finalized_idx, so the read costs the same however many dead rows the table holds.
SELECT (extract(epoch FROM j.attempted_at - j.created_at) * 1000)::float8
FROM skiplock.jobs j
WHERE j.state = 'completed'
  AND j.finalized_at > to_timestamp($1::float8)
  AND j.finalized_at <= to_timestamp($2::float8)
