-- Refresh heartbeat_at of the (id, attempt) pairs this worker still runs (skiplock._heartbeat,
-- sql/api/14_ack.sql). Ids missing from the result were rescued or cancelled elsewhere: the
-- worker tells their handlers to stop.
SELECT id FROM skiplock._heartbeat($1::bigint[], $2::integer[], $3::timestamptz[])
