-- A packet's history, oldest first.
SELECT id, packet_id, from_state, to_state, at, actor, note
FROM skiplock.packet_events
WHERE packet_id = $1
ORDER BY id
