-- One `migrate` installs the SQL API at a time (held until its transaction ends).
SELECT pg_advisory_xact_lock(hashtext('skiplock.api'))
