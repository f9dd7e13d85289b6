-- /metrics: how many packets are in each state (states with none have no row).
SELECT state, count(*) AS packets
FROM skiplock.packets
GROUP BY state
ORDER BY state
