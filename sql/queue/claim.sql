-- Claim up to $3 + $5 due jobs of kinds $2 from queue $1 for worker $4 ($3 for its free slots,
-- $5 more for its buffer: a controlled queue may give the buffer less), reading lane $6[i]
-- from scheduled_at $7[i] on ($6 and $7 NULL: every lane from its start), the lanes after
-- priority $8 only ($8 NULL: from the first). skiplock._claim (sql/api/13_claim.sql) says how;
-- the row with id NULL carries the claim's clock, the lanes it read to their end, where the
-- next claim resumes when this one read as many lanes as one claim may and, for a controlled
-- queue, what its limits said.
SELECT id, kind, queue, args, priority, attempt, max_attempts, scheduled_at, created_at,
       attempted_at, tags, meta, controlled, wait_until, buffer_room, exhausted, lanes_after
FROM skiplock._claim($1, $2::text[], $3::integer, $4, $5::integer, $6::smallint[], $7::timestamptz[],
                     $8::smallint)
