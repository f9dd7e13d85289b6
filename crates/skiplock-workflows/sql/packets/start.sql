-- Worker: start processing packet $1 for job $2 under the concurrency limit $3, as worker $4.
SELECT outcome, state, owner_job FROM skiplock._packet_start($1, $2, $3, $4)
