-- Operator: in_review -> done.
SELECT skiplock.complete_packet($1, $2)
