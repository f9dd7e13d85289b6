-- Start-up recovery: queued/processing packets without a live job get a new one.
SELECT packet_id, was::text AS was, job_id FROM skiplock.recover_packets()
