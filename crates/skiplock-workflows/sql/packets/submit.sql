-- Submit: the packet and its process-packet job in one transaction.
SELECT skiplock.submit_packet($1, $2, $3)
