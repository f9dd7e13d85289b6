-- The "whose move is it?" counts.
SELECT machine, people, queued, processing, ready_for_review, in_review, error, done
FROM skiplock.packet_whose_move
