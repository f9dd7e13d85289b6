-- The history of the packets in $1, oldest first per packet.
SELECT e.id, e.packet_id, e.from_state::text AS from_state, e.to_state::text AS to_state, e.at, e.actor, e.note
FROM skiplock.packet_events e
WHERE e.packet_id = ANY ($1)
ORDER BY e.packet_id, e.id
