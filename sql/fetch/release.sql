-- End host $1's lease: its next request may start $2 seconds from now.
SELECT skiplock._fetch_release($1, make_interval(secs => $2))
