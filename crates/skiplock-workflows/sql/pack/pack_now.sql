-- Pack host $1 at once; returns the do-the-packing job's id.
SELECT skiplock.pack_now($1)
