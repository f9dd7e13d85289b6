-- The board's Complete button: in_review -> done (skiplock.complete_packet).
SELECT skiplock.complete_packet($1, $2)
