-- Start-up recovery: queued/processing packets without a live job get a new one. A packet
-- that could not be recovered comes back with its error and no job.
SELECT packet_id, was, job_id, error FROM skiplock.recover_packets()
