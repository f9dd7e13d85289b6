-- Worker: shutting down mid-processing; packet $1 (job $2) goes back to queued, note $3.
SELECT skiplock._packet_interrupt($1, $2, $3)
