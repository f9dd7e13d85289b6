-- The latency floor's "start": the first statement a woken listener sends. Its start on the
-- database clock, in ms (what skiplock's claim records as attempted_at).
SELECT extract(epoch FROM now())::float8 * 1000
