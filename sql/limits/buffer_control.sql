-- Queue $1's control row, as a producer holding jobs claimed ahead needs it (no row: neither
-- limited nor paused): whether those jobs may still start (a pause, a key's limits, or a limit
-- set after they were claimed make them go back).
SELECT c.paused,
       c.concurrency IS NOT NULL AS limited,
       (c.key_concurrency IS NOT NULL OR c.key_rate IS NOT NULL) AS key_limits
FROM skiplock.queues c
WHERE c.queue = $1
