-- Packets board: how many packets are in each state ("whose move is it?").
SELECT machine, people, queued, processing, ready_for_review, in_review, error, done
FROM skiplock.packet_whose_move
