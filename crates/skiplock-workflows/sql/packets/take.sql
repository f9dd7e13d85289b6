-- Operator: ready_for_review -> in_review.
SELECT skiplock.take_packet($1, $2)
