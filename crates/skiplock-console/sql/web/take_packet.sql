-- The board's Take button: ready_for_review -> in_review (skiplock.take_packet; actor $2,
-- NULL: the console's login).
SELECT skiplock.take_packet($1, $2)
