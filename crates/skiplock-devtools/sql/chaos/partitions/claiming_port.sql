-- The worker connection from address $1 that most recently ran a claim or an ack (its port):
-- a connection of the worker's runtime, whose next statements claim and ack too.
SELECT client_port FROM pg_stat_activity
WHERE client_addr = $1::inet AND (query LIKE '%skiplock._ack(%' OR query LIKE '%skiplock._claim%')
ORDER BY state_change DESC NULLS LAST
LIMIT 1
