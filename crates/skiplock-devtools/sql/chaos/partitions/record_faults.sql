-- The faults the driver injected, at the end of a run.
INSERT INTO skiplock_faults.faults (kind, slot, pid, port, started_at, ended_at)
SELECT * FROM unnest($1::text[], $2::integer[], $3::integer[], $4::integer[], $5::timestamptz[],
                     $6::timestamptz[])
