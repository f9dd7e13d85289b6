-- The database's clock now, in epoch seconds (both ends of the multi-process drain are read
-- on this one clock).
SELECT extract(epoch FROM clock_timestamp())::float8
