-- Worker: processing of packet $1 by job $2 ended (ok $3, result $4, error $5, worker $6).
SELECT recorded, state FROM skiplock._packet_finish($1, $2, $3, $4, $5, $6)
